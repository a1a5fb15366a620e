// The agent's own stdout or stderr as the destination of tee'd worker
// lines: writes happen one at a time, in order, each a run of whole lines,
// so two workers' lines never mix; and a slow or stalled reader (a paused
// terminal, `dtrun | less`) never blocks the event loop: the write waits on
// the loop and the caller stops reading its worker until `done`, which
// pushes back on the worker through its pipe instead of growing a buffer.
//
// Non-blocking without touching the fd the workers and the shell share
// (O_NONBLOCK belongs to the open file, so setting it on fd 1 would hand
// EAGAIN to the shell and to workers that inherit it): pipes, FIFOs and
// terminals are opened again through /proc/self/fd/N, which gives the
// agent an open file of its own. Regular files, sockets and anything that
// cannot be reopened are written with plain blocking writes.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace dtrun::agent {

class console_sink {
 public:
  // `fd`: the agent's stdout or stderr (tests pass a pipe). Not owned.
  console_sink(boost::asio::io_context& io, int fd);
  ~console_sink();

  console_sink(const console_sink&) = delete;
  console_sink& operator=(const console_sink&) = delete;

  // Queues `bytes`, which must stay alive and unchanged until `done` runs
  // (on the loop, never inside this call) once they are written, or
  // dropped because the console is gone (EPIPE, EIO: worker output must
  // not kill the job; the files still get everything).
  void write(std::string_view bytes, std::function<void()> done);

  // Whether writes wait on the event loop (false: blocking writes).
  bool is_async() const { return async_.has_value(); }

 private:
  struct pending {
    std::string_view bytes;
    std::function<void()> done;
  };
  void start_next();
  void write_blocking(std::string_view bytes);

  boost::asio::io_context& io_;
  int fd_;
  std::optional<boost::asio::posix::stream_descriptor> async_;
  std::deque<pending> queue_;
  bool writing_ = false;
  bool broken_ = false;
};

}  // namespace dtrun::agent
