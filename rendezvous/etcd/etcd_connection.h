// One HTTP/1.1 connection to a member of an etcd cluster, plain or TLS,
// through etcd's JSON gateway (POST /v3/...): either unary calls, queued
// and sent one at a time (post), or a single long-lived stream (a watch).
//
// Failover: a connection is made to the current member; when that fails
// (refused, unreachable, TLS handshake) the next member is tried, until
// each one was tried once. A caller that wants a request retried elsewhere
// after it failed calls next_member() and posts again: only the caller
// knows whether the request may run twice.
//
// Bounds: a reply body holds at most options.max_reply_bytes, checked as
// each byte arrives (and against a Content-Length before any is read); a
// watch's unfinished line likewise. Every call has one deadline, set when
// it starts, that no amount of trickled bytes extends. Completion handlers
// run from the loop and never see an exception from here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "rendezvous/etcd/etcd_options.h"
#include "rendezvous/etcd/etcd_parse.h"

namespace boost::asio::ssl {
class context;
}

namespace dtrun::rendezvous {

struct etcd_reply {
  // Empty on success (HTTP 200). The body is not checked here: each call's
  // parse_* (etcd_parse.h) does that.
  std::string error;
  // The request may have reached etcd (so may have been applied).
  bool sent = false;
  // Worth trying again, here or on another member: the connection failed,
  // or etcd answered 503 / "unavailable" (no leader, no quorum yet).
  bool retryable = false;
  int status = 0;
  std::string body;    // the reply's text
  std::string member;  // who answered, for messages
};
using etcd_reply_callback = std::function<void(etcd_reply)>;

// The reply's own error, or else what `parse` (one of etcd_parse.h's, as
// `parse(body)`) found wrong with its shape, as one line naming the member;
// "" when the reply is usable.
template <class Parse>
std::string etcd_reply_problem(const etcd_reply& r, const char* call, Parse&& parse) {
  if (!r.error.empty()) return r.error;
  std::string what = parse(std::string_view(r.body));
  if (what.empty()) return {};
  return "etcd member " + r.member + " sent a malformed " + call + " reply: " + what +
         "; is --rdzv-endpoint an etcd v3 member?";
}

// The TLS settings of `options`, or null when it does not use TLS. Throws
// std::runtime_error naming the file that cannot be used.
std::shared_ptr<boost::asio::ssl::context> make_etcd_tls(const etcd_options& options);

class etcd_connection : public std::enable_shared_from_this<etcd_connection> {
 public:
  static std::shared_ptr<etcd_connection> create(boost::asio::io_context& io,
                                                 const etcd_options& options,
                                                 std::shared_ptr<boost::asio::ssl::context> tls);
  ~etcd_connection();

  // POSTs `body` (JSON text) to `path` and completes with the parsed
  // reply, within `timeout` (connecting, and waiting for the calls posted
  // before it, included). Calls go on the wire one at a time, in order.
  void post(std::string path, std::string body, std::chrono::milliseconds timeout,
            etcd_reply_callback done);

  // POSTs a streaming call (a watch): calls `on_line` with each line of
  // the reply (chunked or not) as it arrives, and `done` once when the
  // stream ends or fails. `timeout` bounds the connect, the request and
  // the reply's header; the stream itself has no time limit, but a line
  // longer than max_reply_bytes ends it.
  void stream(std::string path, std::string body, std::chrono::milliseconds timeout,
              std::function<void(std::string_view)> on_line, etcd_reply_callback done);

  // Drops the connection and moves on to the next member for the next call.
  void next_member();
  // Closes; a call in progress completes with an error. No call after it.
  void close();

  // The member in use, and our address on that connection ("" if none).
  std::string member_text() const;
  std::string local_address() const;

  class impl;

 private:
  explicit etcd_connection(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

}  // namespace dtrun::rendezvous
