#include "agent/python/preload_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "agent/process/fd_closer.h"
#include "agent/python/warm_request.h"
#include "agent/spec/exit_status.h"

namespace asio = boost::asio;

namespace dtrun::agent {
namespace {

// A fork takes milliseconds (tens for a CUDA build of torch); this only
// bounds a warm interpreter that stopped answering, during which the
// agent's loop waits (the request then falls back to a plain start).
constexpr int reply_timeout_ms = 10'000;

// Waits for `events` on `fd`, up to the deadline; false on timeout.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// One message with `fds` attached (SCM_RIGHTS); the message is whole or
// not sent (SOCK_SEQPACKET). Returns 0 or an errno.
int send_with_fds(int socket, const std::string& message, const std::vector<int>& fds,
                  std::chrono::steady_clock::time_point deadline) {
  // A message longer than the socket's send buffer (net.core.wmem_default,
  // about 208 KiB) fails with EMSGSIZE, and a request carries the worker's
  // whole environment: room for it, up to what the system allows
  // (net.core.wmem_max; the kernel doubles the value); past that, still
  // EMSGSIZE, and the worker starts plainly.
  int have = 0;
  socklen_t size = sizeof have;
  if (::getsockopt(socket, SOL_SOCKET, SO_SNDBUF, &have, &size) == 0 && have >= 0 &&
      message.size() + 4096 > static_cast<std::size_t>(have)) {
    int want = static_cast<int>(std::min<std::size_t>(message.size() + 4096, 1 << 28));
    ::setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  }
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  for (;;) {
    if (::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !wait_for(socket, POLLOUT, deadline)) return errno == EAGAIN ? ETIMEDOUT : errno;
  }
}

// One reply; empty when the other end closed, nullopt when it did not
// answer in time.
std::optional<std::string> receive(int socket, std::chrono::steady_clock::time_point deadline) {
  char buffer[4096];
  for (;;) {
    ssize_t n = ::recv(socket, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n >= 0) return std::string(buffer, static_cast<std::size_t>(n));
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return std::string();
    if (errno != EAGAIN || !wait_for(socket, POLLIN, deadline)) return std::nullopt;
  }
}

// What was forked behind `go` goes on: a byte to each, then the ends close.
void release(std::vector<int>& go) {
  for (int fd : go) {
    [[maybe_unused]] ssize_t n = ::write(fd, "g", 1);  // an empty pipe's buffer takes it
    ::close(fd);
  }
  go.clear();
}

// What was forked behind `go` exits: the ends close without a byte.
void drop(std::vector<int>& go) {
  for (int fd : go) ::close(fd);
  go.clear();
}

// Which of dtrun's descriptors 0, 1 and 2 were closed when it started
// (`dtrun ... <&-`), read by a static initializer, before main() opens
// anything: by the time workers start, the agent has reused a closed one
// for a descriptor of its own (asio's eventfd takes fd 0), which fcntl
// then finds open, and a forked worker would be handed it as its stdin.
const std::array<bool, 3> closed_at_start = [] {
  std::array<bool, 3> closed{};
  for (int fd = 0; fd < 3; ++fd) closed[static_cast<std::size_t>(fd)] = ::fcntl(fd, F_GETFD) < 0;
  return closed;
}();

// What a reply other than the expected one says, without the
// "--preload: " its own error lines start with (the caller's line has it).
std::string warm_error(std::string_view reply) {
  constexpr std::string_view own = "error --preload: ";
  constexpr std::string_view error = "error ";
  if (reply.substr(0, own.size()) == own) return std::string(reply.substr(own.size()));
  if (reply.substr(0, error.size()) == error) return std::string(reply.substr(error.size()));
  return fmt::format("the warm interpreter said {}", reply);
}

std::string current_folder() {
  std::vector<char> buffer(4096);
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) return ".";
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

}  // namespace

preload_runner::preload_runner(asio::io_context& io, std::unique_ptr<process_runner> plain,
                               std::vector<std::string> modules, std::size_t script_args_at)
    : io_(io),
      plain_(std::move(plain)),
      modules_(std::move(modules)),
      script_args_at_(script_args_at) {}

preload_runner::~preload_runner() {
  channel_.reset();
  if (warm_pid_ > 0) ::kill(warm_pid_, SIGKILL);
  drop(go_);
  for (auto& [pid, go] : retiring_) drop(go);
}

void preload_runner::start(exit_handler on_exit) {
  plain_->start([this, on_exit = std::move(on_exit)](pid_t pid, int wait_status) {
    if (pid == warm_pid_ || find_retiring(pid) != retiring_.end()) {
      return warm_exited(pid, wait_status);
    }
    on_exit(pid, wait_status);
  });
}

std::vector<std::pair<pid_t, std::vector<int>>>::iterator preload_runner::find_retiring(
    pid_t pid) {
  return std::find_if(retiring_.begin(), retiring_.end(),
                      [pid](const auto& r) { return r.first == pid; });
}

void preload_runner::kill_adopted(std::vector<pid_t> keep) {
  if (warm_pid_ > 0) keep.push_back(warm_pid_);
  for (const auto& r : retiring_) keep.push_back(r.first);
  plain_->kill_adopted(std::move(keep));
}

// The current warm interpreter is on its way out (handed over or killed):
// its exit is expected, and once it is reaped its round's workers go on.
void preload_runner::retire_current() {
  if (warm_pid_ > 0) {
    retiring_.emplace_back(std::exchange(warm_pid_, -1), std::exchange(go_, {}));
  } else {
    release(go_);  // reaped already: what it forked is ours
  }
}

// Its socket closed mid-request: the warm interpreter died (or is past
// use: killed to be sure). This round's other workers start plainly; its
// exit, once reaped, starts another (warm_exited: "starting another", as
// for a death between rounds, not --preload turned off), and releases
// what it forked and told us of.
void preload_runner::lose_current(const std::string& error) {
  if (debug_) debug_(fmt::format("--preload: {}", error));
  if (warm_pid_ > 0) ::kill(warm_pid_, SIGKILL);
  channel_.reset();
  warmth_ = warmth::lost;
}

void preload_runner::warm_up(const spawn_request& like, const std::string& output_file,
                             std::function<void(const std::string&)> warn,
                             std::function<void(const std::string&)> debug) {
  like_ = like;
  output_file_ = output_file;
  say_ = std::move(warn);
  debug_ = std::move(debug);
  start_fresh();
}

// A new warm interpreter, by exec: it imports the modules again.
void preload_runner::start_fresh() {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    return turn_off(
        fmt::format("--preload: cannot make the warm interpreter's socket: {}", std::strerror(errno)));
  }
  fd_closer theirs{ends[1]};
  channel_.emplace(io_, ends[0]);
  int output = ::open(output_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  fd_closer output_closer{output};
  spawn_request request = like_;
  std::string names;
  for (const auto& m : modules_) names += (names.empty() ? "" : ",") + m;
  request.env["DTRUN_PRELOAD"] = names;
  request.stdin_fd = ends[1];
  request.stdout_fd = output >= 0 ? output : -1;
  request.stderr_fd = output >= 0 ? output : -1;
  request.python_worker = false;
  spawn_result started = plain_->spawn(request);
  if (!started.ok()) return turn_off(fmt::format("--preload: {}", started.error));
  warm_pid_ = started.pid;
  warmth_ = warmth::starting;
  started_at_ = std::chrono::steady_clock::now();
  read_ready();
}

// "ready" once the modules are imported (a successor: at once), or
// "error <why>"; nothing else is read asynchronously.
void preload_runner::read_ready() {
  channel_->async_wait(asio::posix::stream_descriptor::wait_read,
                       [this](const boost::system::error_code& ec) {
                         if (ec || warmth_ != warmth::starting) return;
                         char buffer[4096];
                         ssize_t n = ::recv(channel_->native_handle(), buffer, sizeof buffer,
                                            MSG_DONTWAIT);
                         if (n < 0 && (errno == EAGAIN || errno == EINTR)) return read_ready();
                         // Its end closed without a word: it died, and its
                         // exit says how (warm_exited).
                         if (n <= 0) return;
                         std::string reply(buffer, static_cast<std::size_t>(n));
                         if (reply == "ready") return became_ready();
                         turn_off(fmt::format("--preload: {}", warm_error(reply)));
                       });
}

void preload_runner::became_ready() {
  warmth_ = warmth::ready;
  if (debug_) {
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - started_at_;
    debug_(fmt::format("--preload: warm interpreter {} ready in {:.3f} s", warm_pid_,
                       took.count()));
  }
  deaths_before_ready_ = 0;
  for (auto& then : std::exchange(waiting_, {})) then();
}

void preload_runner::when_warm(std::function<void()> then) {
  if (warmth_ == warmth::starting || warmth_ == warmth::lost) {
    if (debug_) debug_("--preload: the workers wait for the warm interpreter to be ready");
    waiting_.push_back(std::move(then));
  } else {
    then();
  }
}

void preload_runner::warm_exited(pid_t pid, int wait_status) {
  if (auto retired = find_retiring(pid); retired != retiring_.end()) {
    release(retired->second);  // its workers go on
    retiring_.erase(retired);
    return;
  }
  // Died as the current one: what it forked this round is ours now too.
  warm_pid_ = -1;
  retire_current();
  channel_.reset();
  if (warmth_ == warmth::off) return;
  bool before_ready = warmth_ == warmth::starting;
  std::string how = describe(decode_wait_status(wait_status));
  if (before_ready && ++deaths_before_ready_ >= 2) {
    return turn_off(fmt::format(
        "--preload: the warm interpreter {} twice before it was ready (its output: {})", how,
        output_file_));
  }
  if (say_) {
    say_(fmt::format("warning: --preload: the warm interpreter {}; starting another (its "
                     "output: {})",
                     how, output_file_));
  }
  warmth_ = warmth::off;
  start_fresh();
}

void preload_runner::turn_off(const std::string& why) {
  if (warm_pid_ > 0) ::kill(warm_pid_, SIGKILL);
  retire_current();
  channel_.reset();
  warmth_ = warmth::off;
  if (say_) say_(fmt::format("warning: {}; workers start without --preload", why));
  for (auto& then : std::exchange(waiting_, {})) then();
}

void preload_runner::say_once(const std::string& line) {
  if (say_ && said_.insert(line).second) say_(line);
}

std::optional<pid_t> preload_runner::request(const std::string& message, std::vector<int> fds,
                                             std::string& error, bool& gone) {
  gone = false;
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) {
    error = fmt::format("cannot make a pipe: {}", std::strerror(errno));
    return std::nullopt;
  }
  fd_closer go_read{go[0]};
  fd_closer go_write{go[1]};
  fds.push_back(go[0]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(reply_timeout_ms);
  int socket = channel_->native_handle();
  if (int e = send_with_fds(socket, message, fds, deadline); e != 0) {
    gone = e == EPIPE || e == ECONNRESET;
    error = fmt::format("cannot ask the warm interpreter for a worker: {}", std::strerror(e));
    return std::nullopt;
  }
  std::optional<std::string> reply = receive(socket, deadline);
  if (!reply) {
    error = "the warm interpreter did not answer";
    return std::nullopt;
  }
  if (reply->empty()) {
    gone = true;
    error = "the warm interpreter's socket closed before it answered";
    return std::nullopt;
  }
  if (auto pid = pid_reply(*reply)) {
    go_.push_back(std::exchange(go_write.fd, -1));
    return pid;
  }
  error = warm_error(*reply);
  return std::nullopt;
}

spawn_result preload_runner::spawn(const spawn_request& worker) {
  if (!worker.python_worker || warmth_ != warmth::ready) return plain_->spawn(worker);
  if (auto why = preload_mismatch(like_, worker, script_args_at_)) {
    say_once(fmt::format("warning: --preload: {} differs from the warm interpreter's; such "
                         "workers start without --preload",
                         *why));
    return plain_->spawn(worker);
  }
  // The worker's stdin, stdout and stderr; -1: dtrun's own, which a plain
  // start inherits, a closed one (`dtrun ... <&-`) as closed. A forked
  // worker can only be handed open descriptors.
  std::array<int, 3> given = {worker.stdin_fd, worker.stdout_fd, worker.stderr_fd};
  std::vector<int> fds;
  for (std::size_t i = 0; i < given.size(); ++i) {
    int fd = given[i] >= 0 ? given[i] : static_cast<int>(i);
    if ((given[i] < 0 && closed_at_start[i]) || ::fcntl(fd, F_GETFD) < 0) {
      say_once(fmt::format("warning: --preload: dtrun's descriptor {} is closed; workers that "
                           "inherit it start without --preload",
                           fd));
      return plain_->spawn(worker);
    }
    fds.push_back(fd);
  }
  std::string message = spawn_message(worker, script_args_at_, current_folder());
  std::string error;
  bool gone = false;
  if (auto pid = request(message, fds, error, gone)) {
    forked_this_round_ = true;
    spawn_result forked;
    forked.pid = *pid;
    return forked;
  }
  // A warm interpreter that died mid-round is replaced, as one that died
  // between rounds (turning --preload off was for what does not work).
  if (gone) {
    lose_current(error);
  } else {
    turn_off(fmt::format("--preload: {}", error));
  }
  return plain_->spawn(worker);
}

// The warm interpreter forks its successor and exits: the round's workers
// become the agent's and go on; the successor is the next round's.
void preload_runner::round_spawned() {
  if (!std::exchange(forked_this_round_, false) || warmth_ != warmth::ready) return;
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    return turn_off(fmt::format("--preload: cannot make a socket: {}", std::strerror(errno)));
  }
  fd_closer theirs{ends[1]};
  std::string error;
  bool gone = false;
  // The successor's "go" end joins the workers': it goes on with them.
  auto successor = request("next", {ends[1]}, error, gone);
  if (!successor) {
    ::close(ends[0]);
    if (gone) return lose_current(error);
    return turn_off(fmt::format("--preload: {}", error));
  }
  retire_current();
  warm_pid_ = *successor;
  channel_.emplace(io_, ends[0]);
  warmth_ = warmth::starting;
  started_at_ = std::chrono::steady_clock::now();
  read_ready();
}

}  // namespace dtrun::agent
