// The agent's control socket: `dtrun status` and `dtrun stacks` ask a
// running agent through a Unix stream socket at <control dir>/<agent
// pid>.sock (control_dir.h).
//
// Protocol: one JSON object per line each way. A request is an object
// with a string "op" ("status", "stacks"); the reply is one JSON object on
// one line. A connection may carry several requests, one at a time. Only
// processes of our own user are answered (SO_PEERCRED); a request line is
// at most 64 KiB; a connection idle for 30 s between requests is closed;
// at most max_connections are open at once.
// Runs on the agent's io_context, single-threaded; nothing is polled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace dtrun::agent {

class control_socket {
 public:
  static constexpr std::size_t max_request_bytes = 64 * 1024;
  // Open connections at most; more are closed at once (each holds one of
  // the agent's file descriptors).
  static constexpr std::size_t max_connections = 64;

  // Sends the reply; call it once, on the io_context's thread, whenever
  // the answer is ready (later calls are ignored). Safe to call after the
  // client or the server went away.
  using respond_fn = std::function<void(nlohmann::ordered_json reply)>;
  // Gets every well-formed request (an object with a string "op"); bad
  // requests are answered {"ok": false, "error": ...} without it.
  using handler_fn = std::function<void(const nlohmann::json& request, respond_fn respond)>;
  using log_fn = std::function<void(const std::string&)>;

  // Listens at `<dir>/<getpid()>.sock` (mode 0600). A socket file there
  // that nobody accepts on (a dead agent's) is replaced. Throws
  // std::runtime_error with one line when the socket cannot be made.
  control_socket(boost::asio::io_context& io, const std::string& dir, handler_fn handler,
                 log_fn debug);
  // Closes every connection and removes the socket file (if it is still
  // the one this object made).
  ~control_socket();

  control_socket(const control_socket&) = delete;
  control_socket& operator=(const control_socket&) = delete;

  // The agent's entry point: finds (making it if needed) the control
  // directory and opens the socket there. When the directory is unsafe or
  // the socket cannot be made, says why in one line through `warn` and
  // returns nullptr: the job runs on without it.
  static std::unique_ptr<control_socket> open(boost::asio::io_context& io, handler_fn handler,
                                              log_fn warn, log_fn debug);

  const std::string& path() const { return path_; }

  struct state;

 private:
  std::string path_;
  std::shared_ptr<state> state_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace dtrun::agent
