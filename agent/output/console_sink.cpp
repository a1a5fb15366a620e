#include "agent/output/console_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

// An open file of our own on what `fd` points to, non-blocking; -1 when
// `fd` is not a pipe, FIFO or terminal, or cannot be reopened.
int reopen_nonblocking(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) return -1;
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  // O_NOCTTY: a terminal opened here must not become our controlling one.
  return ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

}  // namespace

console_sink::console_sink(asio::io_context& io, int fd) : io_(io), fd_(fd) {
  int own = reopen_nonblocking(fd);
  if (own >= 0) async_.emplace(io, own);
}

console_sink::~console_sink() = default;

void console_sink::write(std::string_view bytes, std::function<void()> done) {
  queue_.push_back({bytes, std::move(done)});
  if (!writing_) start_next();
}

void console_sink::write_blocking(std::string_view bytes) {
  while (!bytes.empty() && !broken_) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      broken_ = true;
      return;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void console_sink::start_next() {
  if (queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  if (broken_ || !async_) {
    // Regular files do not stall; a socket (journald) could, and is the
    // documented exception. The completion still runs on the loop, so
    // callers see one behaviour.
    pending next = std::move(queue_.front());
    queue_.pop_front();
    write_blocking(next.bytes);
    asio::post(io_, [this, done = std::move(next.done)] {
      done();
      start_next();
    });
    return;
  }
  asio::async_write(*async_, asio::buffer(queue_.front().bytes.data(), queue_.front().bytes.size()),
                    [this](const boost::system::error_code& ec, std::size_t) {
                      if (ec == asio::error::operation_aborted) return;  // being destroyed
                      if (ec) broken_ = true;
                      pending next = std::move(queue_.front());
                      queue_.pop_front();
                      next.done();
                      start_next();
                    });
}

}  // namespace dtrun::agent
