// A fake etcd member for the etcd client's tests: it listens on
// 127.0.0.1, port 0, on the test's own loop, and answers each request with
// the bytes the test chooses for its path and body, right or wrong. After
// those bytes it can keep the connection for more requests, hold it open
// (a watch), or keep sending: as fast as it can (flood) or one byte every
// 50 ms (drip), until the client hangs up.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/etcd/etcd_options.h"

namespace dtrun::rendezvous::testing {

class fake_etcd_member {
 public:
  enum class then { keep, hold, flood, drip };
  struct reply {
    std::string bytes;
    then after = then::keep;
  };
  using answer_fn = std::function<reply(const std::string& path, const std::string& body)>;

  fake_etcd_member(boost::asio::io_context& io, answer_fn answer);
  ~fake_etcd_member();

  unsigned short port() const;
  // "127.0.0.1:<port>", as --rdzv-endpoint names it.
  std::string endpoint() const;

  // Every request's path, in arrival order.
  const std::vector<std::string>& paths() const;
  // Bytes written by flood and drip, over all connections.
  std::size_t streamed() const;

  class impl;

 private:
  std::shared_ptr<impl> impl_;
};

// Client options for `m` alone: run "job", a 1 s lease, a 1 MiB reply cap,
// and `timeout` for each request and each attempt.
etcd_options options_for(const fake_etcd_member& m, std::chrono::milliseconds timeout);

// A 200 reply whose body is `json` (any text: the point is often that it
// is not what etcd would send).
std::string http_json(const std::string& json);
// The head of a chunked 200 reply (a watch), then one chunk per line.
std::string http_chunked_head();
std::string http_chunk(const std::string& line);

}  // namespace dtrun::rendezvous::testing
