// `--metrics-port`: a small HTTP server on the agent's event loop that
// serves GET /metrics (Prometheus text) and GET /status (the status JSON).
//
// Single-threaded on the io_context it is given; nothing is polled. It is
// built to be left open on a network: requests are header-only (8 KiB at
// most, a body is refused), a connection that sends nothing complete within
// the read timeout is closed (no slowloris), and at most max_connections
// are open at once (further ones are closed at once). Handlers never let an
// exception out: a callback that throws answers 500.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace dtrun::agent {

struct metrics_server_options {
  std::string host = "127.0.0.1";  // loopback unless the user says otherwise
  std::uint16_t port = 0;          // 0: any free port (port() tells which)
  std::size_t max_connections = 64;
  std::size_t max_header_bytes = 8192;
  // A connection must deliver each request within this long (and is
  // closed after being idle this long between keep-alive requests).
  std::chrono::milliseconds read_timeout = std::chrono::seconds(10);
};

class metrics_server {
 public:
  using text_fn = std::function<std::string()>;
  using log_fn = std::function<void(const std::string&)>;

  // Binds and starts accepting. `metrics_text` and `status_json` are
  // called on the io_context's thread, once per request. Throws
  // std::runtime_error with one line naming the flag when the address
  // cannot be bound ("--metrics-port 9100: address in use; pick a free port
  // or 0"). `log` gets a line per unexpected error (accept failures), not
  // per bad request.
  metrics_server(boost::asio::io_context& io, metrics_server_options options, text_fn metrics_text,
                 text_fn status_json, log_fn log);
  // The convenience form with default limits.
  metrics_server(boost::asio::io_context& io, const std::string& host, std::uint16_t port,
                 text_fn metrics_text, text_fn status_json, log_fn log);
  // Stops accepting and closes every open connection; completions still
  // queued on the io_context find the state gone and do nothing.
  ~metrics_server();

  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  // The port bound (the chosen one when constructed with 0).
  std::uint16_t port() const { return port_; }
  // Connections open now (for tests and the notes' measurements).
  std::size_t open_connections() const;

  struct state;

 private:
  std::shared_ptr<state> state_;
  std::uint16_t port_ = 0;
};

}  // namespace dtrun::agent
