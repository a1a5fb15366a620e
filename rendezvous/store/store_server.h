// A TCPStore-compatible key-value server on an Asio event loop.
//
// By default everything runs on the io_context passed in, so the agent
// that hosts the store shares its one event loop with it. With `threads`
// = N > 0 (dtrun-store serve --threads, --rdzv-conf store_threads) the
// connections are spread over N threads of the server's own, each with its
// own event loop, and the protocol logic runs under one lock: the system
// calls, which are most of a request's cost, run in parallel (and, with
// N = 1, apart from the caller's loop), while the key table sees one
// request at a time, so TCPStore's promises (operations on a key in order,
// ADD atomic, a WAIT woken by a SET from any connection) hold as they do on
// the caller's loop. Waits are
// event-driven (per-key waiter lists, woken by set/add/append/...), never
// polled. Each connection speaks the dialect its first bytes announce
// (PyTorch 1.13 or 2.x, see wire_codec.h). A malformed, oversized or
// truncated request, a reply or unsent output over its cap, or running out
// of memory for one request closes that connection only, with one log
// line. The protocol logic is store_session; this file is its Asio I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/loop_threads.h"
#include "rendezvous/store/store_session.h"
#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous {

// The most threads a server may be asked for (dtrun-store serve --threads,
// --rdzv-conf store_threads): more only add context switches on any
// machine that exists today.
inline constexpr unsigned max_store_threads = 1024;

struct store_server_options {
  // Address to listen on. Empty: every interface (IPv6 dual-stack, falling
  // back to IPv4). "127.0.0.1" for standalone runs that must stay local.
  std::string host;
  // 0 picks a free port; port() tells which.
  std::uint16_t port = 0;
  // Caps on what one request may carry.
  wire::limits limits;
  // Output caps (see session_limits and docs/store.md, "Memory budget"):
  // requests are held back while more than output_high_water bytes are
  // unsent, and a watch event or wake-up then closes the connection; one
  // reply is at most max_reply_bytes (0: a key and two maximal values).
  std::size_t output_high_water = 16 * 1024 * 1024;
  std::size_t max_reply_bytes = 0;
  // listen() backlog; 0 reads /proc/sys/net/core/somaxconn.
  int backlog = 0;
  // Decides whether an accepted connection may stay, before any of its
  // bytes are read: returns an empty string to admit it, or the reason it
  // is refused (logged once, the connection closed). Unset: everyone is
  // admitted. `fd` is the accepted socket's descriptor. Used for
  // --standalone's same-user rule and the client-network allow-list.
  std::function<std::string(int fd)> admit;
  // Where the server's one-line diagnostics go (bad input, dropped
  // clients). Defaults to stderr with a "dtrun-store:" prefix. With
  // threads it is called from the server's threads, one call at a time.
  std::function<void(const std::string&)> log;
  // 0: every connection on the caller's io_context (the agent's event
  // loop, by default). N: the server starts N threads of its own, each
  // running an event loop that serves a share of the connections (new ones
  // go round robin); the caller's io_context only accepts. docs/store.md.
  unsigned threads = 0;
};

class store_server {
 public:
  // Binds and listens at once, so port() is valid on return. Throws
  // store_error with an actionable message when the address is in use or
  // cannot be bound, or the threads cannot be started. Accepting starts
  // when the io_context runs.
  store_server(boost::asio::io_context& io, store_server_options options);
  ~store_server();

  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;

  std::uint16_t port() const;
  // Forgets every key and queue (key_table::clear); connections and their
  // pending waits stay. Call from the io_context's thread.
  void clear_keys();

  // Closes the listening socket and every connection; run() then returns
  // once nothing else is pending. Idempotent. Call from the io_context's
  // thread. With threads the connections close on their own threads,
  // which the destructor waits for.
  void stop();

  // A snapshot, safe from the io_context's thread in either mode.
  store_server_stats stats() const;

 private:
  class impl;
  friend class session;
  // Joined (their connections closed) by the destructor, before impl_,
  // which the connections use, may go.
  std::unique_ptr<loop_threads> threads_;
  std::shared_ptr<impl> impl_;
};

}  // namespace dtrun::rendezvous
