#include "agent/watch/file_timer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "agent/spec/exit_status.h"
#include "agent/spec/wall_clock.h"
#include "rendezvous/base/generation_timer.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

// The longest wait armed at once (10 years, as dtrun's other durations):
// a far-future deadline cannot overflow the steady clock.
constexpr double max_wait_seconds = 315360000.0;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format(
      "TORCHELASTIC_TIMER_FILE={}: {}; unset it (dtrun then makes one) or name a path you can "
      "write to",
      printable(path), what));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

file_timer_config file_timer_from_env(const env_map& env) {
  file_timer_config c;
  auto on = env.find("TORCHELASTIC_ENABLE_FILE_TIMER");
  c.enabled = on != env.end() && on->second == "1";
  if (auto file = env.find("TORCHELASTIC_TIMER_FILE"); file != env.end()) c.path = file->second;
  return c;
}

file_timer::file_timer(asio::io_context& io, std::string path, hooks h, std::size_t max_timers)
    : path_(std::move(path)),
      hooks_(std::move(h)),
      reader_(io),
      deadline_(io),
      table_(max_timers),
      buffer_(max_timer_line + 1) {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) fail(path_, "exists and is not a named pipe");
    // Opening for writing without blocking succeeds only when a process
    // reads the pipe: another job's watchdog, whose workers would lose it
    // if we replaced it. ENXIO: nobody reads, a leftover.
    int probe = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (probe >= 0) {
      ::close(probe);
      fail(path_, "is a named pipe that another process reads (another job's watchdog?)");
    }
    ::unlink(path_.c_str());  // torch's server also starts from a fresh pipe
  }
  if (::mkfifo(path_.c_str(), 0600) != 0) fail(path_, "cannot create the named pipe: " + errno_text());
  // Reader first, non-blocking (no writer yet); then our own writer, which
  // keeps the pipe open between clients so the reader never sees EOF.
  // O_NOFOLLOW: what we open is the pipe we made, not a link put there.
  int rd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (rd < 0 || ::fstat(rd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    std::string why = errno_text();
    if (rd >= 0) ::close(rd);
    ::unlink(path_.c_str());
    fail(path_, "cannot open the named pipe: " + why);
  }
  writer_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (writer_ < 0) {
    std::string why = errno_text();
    ::close(rd);
    ::unlink(path_.c_str());
    fail(path_, "cannot open the named pipe: " + why);
  }
  device_ = st.st_dev;
  inode_ = st.st_ino;
  reader_.assign(rd);
  read();
}

file_timer::~file_timer() {
  boost::system::error_code ignored;
  reader_.close(ignored);
  if (writer_ >= 0) ::close(writer_);
  deadline_.cancel();
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_) {
    ::unlink(path_.c_str());
  }
}

void file_timer::forget(pid_t pid) {
  table_.drop(pid);
  rearm();
}

void file_timer::forget_all() {
  table_.clear();
  rearm();
}

void file_timer::read() {
  reader_.async_read_some(asio::buffer(buffer_), [this, alive = std::weak_ptr<int>(alive_)](
                                                        const boost::system::error_code& ec,
                                                        std::size_t n) {
    if (alive.expired() || ec == asio::error::operation_aborted) return;  // closed: ending
    if (ec) {
      // Cannot happen while we hold a writer (no EOF); say it and stop
      // watching rather than spin on an error.
      hooks_.error(fmt::format("watchdog: reading {} failed: {}; deadlines are no longer watched",
                               printable(path_), ec.message()));
      return;
    }
    std::vector<timer_line_splitter::line> lines;
    splitter_.feed(std::string_view(buffer_.data(), n), lines);
    for (const auto& line : lines) on_line(line);
    rearm();
    read();
  });
}

void file_timer::bad_line(const std::string& why) {
  std::string text = fmt::format("watchdog: ignoring a bad request in {}: {}", printable(path_), why);
  if (said_bad_line_) {
    hooks_.debug(text);
    return;
  }
  said_bad_line_ = true;
  hooks_.error(text + " (further bad requests are logged with -v only)");
}

void file_timer::on_line(const timer_line_splitter::line& line) {
  if (line.overlong) {
    bad_line(fmt::format("a line longer than {} bytes", max_timer_line));
    return;
  }
  if (line.text.empty()) return;  // a blank line: nothing asked
  std::string error;
  auto request = parse_timer_request(line.text, error);
  if (!request) {
    std::string shown = line.text.substr(0, 200);
    bad_line(fmt::format("{}: {}{}", error, printable(shown), line.text.size() > 200 ? "..." : ""));
    return;
  }
  if (hooks_.request) hooks_.request(request->pid);
  if (request->is_release()) {
    table_.release(request->pid, request->scope_id);
    return;
  }
  if (!hooks_.is_worker(request->pid)) {
    // A worker's own children (DataLoader, torch.multiprocessing) land here
    // too: torch would signal them; dtrun signals only its workers.
    std::string text = fmt::format(
        "watchdog: ignoring a timer for pid {} (scope {}): not a running worker of this agent",
        request->pid, printable(request->scope_id));
    if (said_not_worker_) {
      hooks_.debug(text);
    } else {
      said_not_worker_ = true;
      hooks_.error(text + " (further ones are logged with -v only)");
    }
    return;
  }
  if (!table_.set(request->pid, request->scope_id, request->expiration_time, request->signal)) {
    std::string text = fmt::format(
        "watchdog: {} timers are outstanding already; ignoring the one of pid {} (scope {})",
        table_.size(), request->pid, printable(request->scope_id));
    if (said_full_) {
      hooks_.debug(text);
    } else {
      said_full_ = true;
      hooks_.error(text);
    }
  }
}

void file_timer::rearm() {
  auto earliest = table_.earliest();
  if (!earliest) {
    deadline_.cancel();
    return;
  }
  double wait = std::clamp(*earliest - wall_clock_seconds(), 0.0, max_wait_seconds);
  // Rounded up, so the timer never fires just before the deadline it is for.
  // Replaces the earlier arming: its expiry is dropped (generation_timer).
  deadline_.arm_after(std::chrono::ceil<std::chrono::microseconds>(
                          std::chrono::duration<double>(wait)) +
                          std::chrono::microseconds(1),
                      [this] { on_deadline(); });
}

void file_timer::on_deadline() {
  for (const auto& e : table_.take_expired(wall_clock_seconds())) {
    if (e.signal <= 0) {
      hooks_.debug(fmt::format("watchdog: pid {} passed its deadline (scope {}) but asked for no "
                               "signal; not killed",
                               e.pid, printable(e.scope_id)));
      continue;
    }
    if (hooks_.is_worker(e.pid)) hooks_.expire(e);
  }
  rearm();
}

}  // namespace dtrun::agent
