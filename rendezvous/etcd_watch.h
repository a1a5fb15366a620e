// One etcd watch over a key range, kept alive across member failures: when
// its connection drops it reconnects to the next member and resumes at the
// revision after the last event it delivered, so no event is lost or seen
// twice. Over etcd's HTTP gateway a watch needs a connection of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd_connection.h"

namespace dtrun::rendezvous {

struct etcd_event {
  bool deleted = false;
  std::string key;        // decoded, with the key prefix
  std::string value;      // decoded (empty for a delete)
  std::string prev_value; // decoded; only with prev_kv
  std::int64_t revision = 0;
};

class etcd_watch : public std::enable_shared_from_this<etcd_watch> {
 public:
  struct spec {
    std::string key, range_end;  // raw bytes; range_end empty: the one key
    std::int64_t start_revision = 0;
    bool prev_kv = false;
    bool deletes_only = false;
  };

  // Starts watching at once. `on_event` runs on the loop for each event in
  // revision order. It never gives up by itself: a watch ends with close().
  static std::shared_ptr<etcd_watch> start(boost::asio::io_context& io, const etcd_options& options,
                                           std::shared_ptr<boost::asio::ssl::context> tls, spec s,
                                           std::function<void(const etcd_event&)> on_event);
  void close();

 private:
  etcd_watch(boost::asio::io_context& io, const etcd_options& options,
             std::shared_ptr<boost::asio::ssl::context> tls, spec s,
             std::function<void(const etcd_event&)> on_event);
  void open();
  void line(std::string_view text);
  void ended(const etcd_reply& r);

  etcd_options options_;
  std::shared_ptr<etcd_connection> connection_;
  boost::asio::steady_timer retry_;
  spec spec_;
  std::function<void(const etcd_event&)> on_event_;
  std::int64_t next_revision_ = 0;
  bool closed_ = false;
  bool in_callback_ = false;
  std::uint64_t attempt_ = 0;
};

}  // namespace dtrun::rendezvous
