#include "agent/report/agent_log.h"

#include <unistd.h>

#include <cerrno>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace {

// One write() for the whole text: stderr is unbuffered and shared with the
// workers, so a line written piecemeal could be split by theirs.
void write_stderr(const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to complain to
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace

agent_log::agent_log(verbosity level, sink out) : level_(level), out_(std::move(out)) {
  if (!out_) out_ = write_stderr;
}

void agent_log::error(std::string_view message) const { emit(message); }

void agent_log::info(std::string_view message) const {
  if (level_ != verbosity::quiet) emit(message);
}

void agent_log::debug(std::string_view message) const {
  if (level_ == verbosity::verbose) emit(message);
}

void agent_log::block(std::string_view text) const {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.append(prefix);
    out.append(printable(text.substr(start, end - start)));
    out += '\n';
    start = end + 1;
  }
  out_(out);
}

void agent_log::emit(std::string_view message) const {
  std::string line(prefix);
  line.append(printable(message));
  line += '\n';
  out_(line);
}

}  // namespace dtrun::agent
