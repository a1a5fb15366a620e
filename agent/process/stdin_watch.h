// The agent's end of the pipe from the dtrun that started it over ssh
// (dtrun --hosts, docs/ssh.md; the internal flag --stop-on-stdin-eof).
//
// ssh without a terminal signals nothing when the launching dtrun dies or
// the connection drops: the remote agent only sees its stdin reach
// end-of-file. So the launching dtrun keeps the pipe open for the whole
// run and writes one line per signal it wants forwarded ("SIGINT\n");
// end-of-file (or a read error) means "the launcher is gone".
//
// Read on the agent's event loop through a posix::stream_descriptor: no
// thread, no polling. Handlers run on the loop and do not throw.
#pragma once

#include <array>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace dtrun::agent {

// A private copy of stdin for the watch, and /dev/null in its place, so
// no worker can read the launcher's lines. Throws std::runtime_error when
// stdin cannot be duplicated.
int take_stdin();

class stdin_watch {
 public:
  struct hooks {
    // A line naming a signal (SIGINT, TERM, 15): act as on that signal.
    std::function<void(int signal)> on_signal;
    // End-of-file or a read error: the launcher is gone.
    std::function<void()> on_eof;
    // A line that names no signal (ignored), for the agent's log.
    std::function<void(const std::string&)> on_junk;
  };

  // Takes ownership of `fd` (closed by the destructor) and starts reading.
  stdin_watch(boost::asio::io_context& io, int fd, hooks h);
  ~stdin_watch();

  stdin_watch(const stdin_watch&) = delete;
  stdin_watch& operator=(const stdin_watch&) = delete;

 private:
  void read_more();
  void take(std::size_t n);

  boost::asio::posix::stream_descriptor stream_;
  hooks hooks_;
  std::array<char, 256> buffer_{};
  std::string line_;
  bool closed_ = false;
};

}  // namespace dtrun::agent
