#include "agent/watch/stack_capture.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/asio/post.hpp>

#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

// The whole of a small file from `offset`, at most `limit` bytes. The
// worker owns its folder: a FIFO put in the file's place must not block
// the event loop in open(), so only a regular file is read.
std::string read_from(const std::string& path, std::size_t offset, std::size_t limit) {
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return text;
  }
  char buffer[64 * 1024];
  off_t at = static_cast<off_t>(offset);
  while (text.size() < limit) {
    ssize_t n = ::pread(fd, buffer, std::min(sizeof buffer, limit - text.size()), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    at += n;
  }
  ::close(fd);
  return text;
}

std::size_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::size_t>(st.st_size) : 0;
}

// Gone, or a zombie not yet reaped (its pid still names it, but it runs
// no handler and cannot be traced).
bool exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::size_t paren = text.rfind(") ");
  if (paren == std::string::npos || paren + 2 >= text.size()) return true;
  char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

// Whether `pid` has a handler for `sig` (its SigCgt mask). A header says
// the hook listened once; a worker that exec'd another program since keeps
// its pid and header, but the signal's default action would now kill it.
bool catches(pid_t pid, int sig) {
  if (sig < 1 || sig > 64) return false;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    std::string hex = line.substr(7);
    hex.erase(0, hex.find_first_not_of(" \t"));
    auto mask = parse_whole<std::uint64_t>(hex, 16);
    return mask && ((*mask >> (sig - 1)) & 1) != 0;
  }
  return false;
}

// The largest header a stack file is searched for: a hook's header sits at
// the start of each process's part, and dumps are small, so a file this
// big is not one the hook wrote and is not trusted.
constexpr std::size_t max_stack_file = 64 << 20;

}  // namespace

rank_stack captured_stack::summary() const {
  rank_stack r;
  r.rank = rank;
  r.has_python = hooked && !python_text.empty();
  r.complete = complete;
  r.innermost = innermost;
  r.innermost_user = innermost_user;
  r.native = exited ? std::string("the worker had exited") : native_innermost;
  return r;
}

stack_capture::stack_capture(asio::io_context& io, stack_capture_options options)
    : io_(io), options_(std::move(options)), inotify_(io), python_deadline_(io),
      events_(16 * 1024) {}

stack_capture::~stack_capture() {
  boost::system::error_code ignored;
  python_deadline_.cancel();
  inotify_.close(ignored);
  native_.clear();  // kills eu-stack children still running
}

std::vector<pid_t> stack_capture::helper_pids() const {
  std::vector<pid_t> pids;
  for (const auto& run : native_) {
    if (run && run->running_pid() > 0) pids.push_back(run->running_pid());
  }
  return pids;
}

void stack_capture::capture(std::vector<capture_target> targets, done_handler done) {
  if (busy()) throw std::logic_error("stack_capture: a capture is already under way");
  done_ = std::move(done);
  targets_ = std::move(targets);
  std::size_t n = targets_.size();
  results_.assign(n, captured_stack{});
  offsets_.assign(n, 0);
  headers_.assign(n, hook_header{});
  watches_.assign(n, -1);
  native_.clear();
  python_phase_ = true;

  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd >= 0) inotify_.assign(fd);

  for (std::size_t i = 0; i < n; ++i) {
    const capture_target& t = targets_[i];
    captured_stack& r = results_[i];
    r.local_rank = t.local_rank;
    r.rank = t.rank;
    r.pid = t.pid;
    if (t.pid <= 0 || exited(t.pid)) {
      r.exited = true;
      continue;
    }
    if (t.stack_file.empty()) continue;
    std::size_t size = file_size(t.stack_file);
    if (size == 0 || size > max_stack_file) continue;
    std::string text = read_from(t.stack_file, 0, size);
    auto found = find_last_header(text);
    // Only the process the hook registered in: another pid's header (an
    // earlier worker, a header not yet written) means nobody handles it,
    // and so does a signal the process no longer catches (it exec'd).
    if (!found || found->header.pid != t.pid || !catches(t.pid, found->header.signal)) continue;
    headers_[i] = found->header;
    offsets_[i] = text.size();
    // Watched before the signal, so no write can be missed.
    if (inotify_.is_open()) {
      watches_[i] = ::inotify_add_watch(inotify_.native_handle(), t.stack_file.c_str(),
                                        IN_MODIFY | IN_CLOSE_WRITE);
    }
    // To the main thread: faulthandler then marks it "Current thread".
    if (::syscall(SYS_tgkill, t.pid, t.pid, found->header.signal) != 0) {
      r.exited = errno == ESRCH;
      continue;
    }
    r.hooked = true;
  }

  std::weak_ptr<int> alive = alive_;
  python_deadline_.expires_after(options_.python_deadline);
  python_deadline_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (alive.expired() || ec || !python_phase_) return;
    end_python();
  });
  if (inotify_.is_open()) watch();
  // Dumps already written (or nothing to wait for) end the phase at once;
  // posted, so `done` never runs inside capture().
  asio::post(io_, [this, alive] {
    if (alive.expired() || !python_phase_) return;
    check_python();
  });
}

void stack_capture::watch() {
  std::weak_ptr<int> alive = alive_;
  inotify_.async_read_some(asio::buffer(events_), [this, alive](const boost::system::error_code& ec,
                                                                std::size_t) {
    if (alive.expired() || ec || !python_phase_) return;
    // Which file changed does not matter: every unfinished dump is read
    // again (a few small files).
    check_python();
    if (python_phase_) watch();
  });
}

bool stack_capture::read_dump(std::size_t i) {
  captured_stack& r = results_[i];
  r.python_text = read_from(targets_[i].stack_file, offsets_[i], options_.max_python_text);
  python_dump dump = parse_dump(r.python_text, headers_[i]);
  r.complete = dump.complete;
  r.innermost = innermost(dump);
  r.innermost_user = innermost_user(dump);
  return r.complete;
}

void stack_capture::check_python() {
  bool all = true;
  for (std::size_t i = 0; i < results_.size(); ++i) {
    if (!results_[i].hooked || results_[i].complete) continue;
    if (!read_dump(i)) all = false;
  }
  if (all) end_python();
}

void stack_capture::end_python() {
  python_phase_ = false;
  boost::system::error_code ignored;
  python_deadline_.cancel();
  inotify_.close(ignored);  // its watches go with it
  // The last look: what is there now is what the deadline takes.
  for (std::size_t i = 0; i < results_.size(); ++i) {
    if (results_[i].hooked && !results_[i].complete) read_dump(i);
  }
  start_native();
}

void stack_capture::start_native() {
  std::optional<std::string> eu_stack;
  if (options_.native) eu_stack = find_eu_stack(options_.path_list);
  native_.clear();
  native_.resize(results_.size());
  native_left_ = 0;
  for (std::size_t i = 0; i < results_.size(); ++i) {
    captured_stack& r = results_[i];
    if (r.exited) {
      r.native_text = "the worker had exited";
      continue;
    }
    if (!options_.native) continue;
    if (!eu_stack) {
      r.native_text = eu_stack_missing;
      r.native_innermost = eu_stack_missing;
      continue;
    }
    native_stack_options o;
    o.eu_stack = *eu_stack;
    o.deadline = options_.native_deadline;
    o.max_output = options_.max_native_output;
    ++native_left_;
    std::weak_ptr<int> alive = alive_;
    native_[i] = std::make_unique<native_stack_run>(
        io_, r.pid, o, [this, alive, i](native_stack_run::result out) {
          if (alive.expired()) return;
          captured_stack& done = results_[i];
          if (!out.error.empty()) {
            done.native_text = "eu-stack did not run: " + out.error;
          } else {
            done.native_text = std::move(out.text);
            if (out.truncated) done.native_text += "\n(eu-stack output cut here)\n";
            if (out.timed_out) done.native_text += "\n(eu-stack killed at its deadline)\n";
            done.native_innermost = native_innermost(done.native_text, done.pid);
            if (done.native_innermost.empty() && exited(done.pid)) done.exited = true;
          }
          if (--native_left_ == 0) {
            // Not from inside the run's own handler: it is destroyed here.
            std::weak_ptr<int> still = alive_;
            asio::post(io_, [this, still] {
              if (!still.expired()) finish();
            });
          }
        });
  }
  if (native_left_ == 0) finish();
}

void stack_capture::finish() {
  native_.clear();
  for (std::size_t i = 0; i < results_.size(); ++i) {
    const capture_target& t = targets_[i];
    captured_stack& r = results_[i];
    if (t.out_file.empty()) continue;
    std::ostringstream text;
    text << "# dtrun stack capture: rank " << r.rank << " (local rank " << r.local_rank << "), pid "
         << r.pid << "\n";
    if (r.exited) text << "# the worker had exited\n";
    if (r.hooked) {
      text << "# Python stacks (faulthandler, all threads"
           << (r.complete ? "" : "; dump incomplete") << "):\n"
           << r.python_text;
    } else {
      text << "# no Python stacks (not a Python worker, or its hook did not load)\n";
    }
    text << "\n# native stacks (eu-stack):\n" << r.native_text;
    if (!r.native_text.empty() && r.native_text.back() != '\n') text << '\n';
    // O_NONBLOCK: a FIFO the worker put there fails (ENXIO) or takes what
    // fits, rather than blocking the event loop.
    int fd = ::open(t.out_file.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    std::string data = text.str();
    bool ok = fd >= 0;
    std::size_t at = 0;
    while (ok && at < data.size()) {
      ssize_t n = ::write(fd, data.data() + at, data.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok = false; else at += static_cast<std::size_t>(n);
    }
    if (!ok) r.error = "cannot write " + printable(t.out_file) + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
  }
  // Last: `done` may destroy this object.
  auto done = std::move(done_);
  done_ = nullptr;
  auto results = std::move(results_);
  results_.clear();
  if (done) done(std::move(results));
}

}  // namespace dtrun::agent
