#include "agent/process/stdin_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <stdexcept>

#include <boost/asio/buffer.hpp>

#include "agent/spec/exit_status.h"

namespace dtrun::agent {

int take_stdin() {
  int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) throw std::runtime_error("cannot duplicate stdin for --stop-on-stdin-eof");
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::close(null);
  }
  return fd;
}

namespace {
// A control line is a signal name; anything longer is not one of ours and
// is dropped rather than buffered without bound.
constexpr std::size_t max_line = 64;
}  // namespace

stdin_watch::stdin_watch(boost::asio::io_context& io, int fd, hooks h)
    : stream_(io, fd), hooks_(std::move(h)) {
  read_more();
}

stdin_watch::~stdin_watch() {
  closed_ = true;
  boost::system::error_code ignored;
  stream_.close(ignored);
}

void stdin_watch::read_more() {
  stream_.async_read_some(boost::asio::buffer(buffer_),
                          [this](const boost::system::error_code& ec, std::size_t n) {
                            // Cancelled by the destructor: `this` may be gone.
                            if (ec == boost::asio::error::operation_aborted) return;
                            if (ec) {
                              // EOF, or the pipe broke: the launcher is gone
                              // either way. Once: no more reads.
                              if (hooks_.on_eof) hooks_.on_eof();
                              return;
                            }
                            take(n);
                            if (!closed_) read_more();
                          });
}

void stdin_watch::take(std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    char c = buffer_[i];
    if (c != '\n') {
      if (line_.size() <= max_line) line_ += c;
      continue;
    }
    std::string line = std::move(line_);
    line_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    int sig = line.size() <= max_line ? parse_signal(line) : 0;
    if (sig > 0) {
      if (hooks_.on_signal) hooks_.on_signal(sig);
    } else if (hooks_.on_junk) {
      hooks_.on_junk(line);
    }
  }
}

}  // namespace dtrun::agent
