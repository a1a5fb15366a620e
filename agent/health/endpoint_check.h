// A node health check's built-in (docs/agent.md "Node health"): the
// rendezvous endpoint's host name resolves. A node whose resolver is
// broken (a stale /etc/resolv.conf, a DNS server down) would otherwise
// fail later in the store client's connect, or hang in it; checked before
// the node joins, it is one line naming the host.
//
// Asio's resolver: getaddrinfo runs on Asio's own resolver thread, so the
// loop is never held up. The lookup is bounded by a timeout; getaddrinfo
// itself cannot be interrupted, so at the timeout the check ends and the
// lookup's late answer is ignored.
//
// Single-threaded, on the agent's event loop. Completion handlers do not
// throw.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "agent/health/node_health.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

// The finding (check "endpoint") for `host`: healthy when `error` is
// empty, else its reason names the host, the error and
// `getent hosts HOST` to check by hand.
health_finding endpoint_finding(const std::string& host, const std::string& error, bool gating);

class endpoint_check {
 public:
  explicit endpoint_check(boost::asio::io_context& io);
  // cancel().
  ~endpoint_check();

  endpoint_check(const endpoint_check&) = delete;
  endpoint_check& operator=(const endpoint_check&) = delete;

  // Resolves `host` (a name or an address literal; no port) and calls
  // `done` once, on the loop, never from inside run(). At most one run at
  // a time; a new run cancels the one before.
  void run(const std::string& host, std::chrono::milliseconds timeout, bool gating,
           std::function<void(health_finding)> done);
  // `done` is not called. Idempotent.
  void cancel();

  bool running() const { return static_cast<bool>(done_); }
  // The first address the last lookup that succeeded gave ("10.0.0.1"),
  // else empty.
  const std::string& address() const { return address_; }

 private:
  void finish(const std::string& error);

  boost::asio::ip::tcp::resolver resolver_;
  generation_timer timeout_;
  std::string host_;
  std::string address_;
  bool gating_ = false;
  std::function<void(health_finding)> done_;
  // Moved on by every run and cancel(), and by destruction: a lookup's
  // late answer finds it changed.
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace dtrun::agent
