#include "agent/health/health_command.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "agent/spec/exit_status.h"
#include "agent/spec/worker_env.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

// What is read at the exit without waiting, at most: a leftover that
// escaped the process group and still writes must not hold the loop.
constexpr std::size_t drain_limit = 1 << 20;

}  // namespace

std::string health_command_failure(const std::string& command, const std::string& what,
                                   const std::vector<std::string>& output_tail) {
  std::string line =
      fmt::format("node health check failed: `{}` {}", printable_excerpt(command, 200), what);
  if (!output_tail.empty()) line += fmt::format(" (last line: \"{}\")", output_tail.back());
  return line;
}

std::string format_check_timeout(std::chrono::milliseconds timeout) {
  auto ms = timeout.count();
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  return fmt::format("{:g} s", static_cast<double>(ms) / 1000.0);
}

health_command::health_command(asio::io_context& io, process_runner& runner, worker_group& exits,
                               health_command_options options)
    : io_(io), runner_(runner), exits_(exits), options_(std::move(options)), pipe_(io),
      timeout_(io), buffer_(64 * 1024) {}

health_command::~health_command() { cancel(); }

void health_command::run(std::function<void(health_finding)> done) {
  cancel();  // one run at a time: an earlier one never reports
  output_ = last_lines{};
  ended_.reset();
  done_ = std::move(done);
  std::uint64_t run_generation = ++*generation_;

  std::string error;
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int fds[2] = {-1, -1};
  if (null_fd < 0) {
    error = std::string("cannot open /dev/null: ") + std::strerror(errno);
  } else if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = std::string("cannot make a pipe: ") + std::strerror(errno);
  } else {
    spawn_request request;
    request.program = options_.shell;
    request.args = {"-c", options_.command};
    request.env = options_.env ? *options_.env : current_environment();
    request.stdin_fd = null_fd;  // never the agent's terminal
    request.stdout_fd = fds[1];
    request.stderr_fd = fds[1];
    spawn_result spawned = runner_.spawn(request);
    ::close(fds[1]);  // only the command's copies are left
    if (spawned.ok()) {
      pid_ = spawned.pid;
      pipe_.assign(fds[0]);
    } else {
      ::close(fds[0]);
      error = spawned.error;
    }
  }
  if (null_fd >= 0) ::close(null_fd);

  if (pid_ < 0) {
    // Never from inside run(): the caller may not be ready for `done` yet.
    asio::post(io_, [this, generation = generation_, run_generation, error] {
      if (*generation != run_generation) return;
      finish(failed("could not start: " + error));
    });
    return;
  }
  runner_.guard(pid_);
  // cancel() and the destructor unwatch, so `this` is alive when it runs.
  exits_.watch_helper(pid_, [this](int wait_status) { exited(wait_status); });
  timeout_.arm_after(options_.timeout, [this] { timed_out(); });
  read();
}

void health_command::cancel() {
  if (!running()) return;
  ++*generation_;
  stop_command();
  done_ = nullptr;
}

void health_command::read() {
  pipe_.async_read_some(
      asio::buffer(buffer_),
      [this, generation = generation_, run_generation = *generation_](
          const boost::system::error_code& ec, std::size_t n) {
        if (*generation != run_generation) return;
        if (n > 0) output_.feed(std::string_view(buffer_.data(), n));
        if (ended_) {
          // The read end() cancelled, back with what it had read, if
          // anything: now what is left, then the verdict.
          drain_now();
          finish(verdict());
          return;
        }
        if (ec) {
          // EOF (or a failed pipe): the output is over, the check is not;
          // it ends with the command's exit or its timeout.
          boost::system::error_code ignored;
          pipe_.close(ignored);
          return;
        }
        read();
      });
}

// What is already in the pipe, read without waiting for more. Only once
// no read is in flight: that one's bytes come first, and it reads into
// the same buffer.
void health_command::drain_now() {
  if (!pipe_.is_open()) return;
  int fd = pipe_.native_handle();
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return;
  std::size_t total = 0;
  while (total < drain_limit) {
    ssize_t n = ::read(fd, buffer_.data(), buffer_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // empty for now (EAGAIN), or every writer gone
    output_.feed(std::string_view(buffer_.data(), static_cast<std::size_t>(n)));
    total += static_cast<std::size_t>(n);
  }
}

void health_command::exited(int wait_status) { end(ending{wait_status, false}); }

void health_command::timed_out() { end(ending{0, true}); }

// The command ended (or ran out of time): its leftovers are killed (a
// background child still writing), and the read in flight is cancelled.
// That read may already have taken the command's last bytes from the pipe
// (its completion queued behind this one), so the check finishes in its
// handler, which runs at once either way; with no read in flight (the
// output ended), right here.
void health_command::end(ending how) {
  if (ended_) return;
  ended_ = how;
  timeout_.cancel();
  kill_command();
  if (pipe_.is_open()) {
    boost::system::error_code ignored;
    pipe_.cancel(ignored);
    return;
  }
  finish(verdict());
}

health_finding health_command::verdict() const {
  if (ended_->timed_out) return failed("timed out after " + format_check_timeout(options_.timeout));
  exit_status status = decode_wait_status(ended_->wait_status);
  if (status.ok()) {
    health_finding healthy;
    healthy.check = "command";
    healthy.output_tail = output_.lines();
    return healthy;
  }
  return failed(status.signal != 0 ? "killed by " + signal_name(status.signal)
                                   : fmt::format("exited with {}", status.code));
}

void health_command::kill_command() {
  if (ended_ && !ended_->timed_out) {
    // Reaped: its pid may be another's now, its group (leftovers) not,
    // while a member is left.
    runner_.kill_group(pid_);
  } else {
    // Not reaped, so the pid is still the command's; its group too, or
    // (a fork that has not reached setsid yet) soon: then the command
    // alone (process_runner::signal_worker).
    runner_.signal_worker(pid_, SIGKILL);
  }
}

void health_command::stop_command() {
  timeout_.cancel();
  if (pid_ > 0) {
    exits_.unwatch_helper(pid_);
    kill_command();
    runner_.unguard(pid_);
    pid_ = -1;
  }
  boost::system::error_code ignored;
  pipe_.close(ignored);
}

void health_command::finish(health_finding finding) {
  ++*generation_;
  stop_command();
  // Last: `done` may destroy this object or start the next run.
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(finding));
}

health_finding health_command::failed(const std::string& what) const {
  health_finding finding;
  finding.check = "command";
  finding.healthy = false;
  finding.gating = true;
  finding.output_tail = output_.lines();
  finding.reason = health_command_failure(options_.command, what, finding.output_tail);
  return finding;
}

}  // namespace dtrun::agent
