#include "agent/watch/native_stack.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/post.hpp>

#include "agent/process/worker_process.h"

namespace dtrun::agent {
namespace asio = boost::asio;

std::optional<std::string> find_eu_stack(const std::string& path_list) {
  auto found = resolve_program("eu-stack", path_list);
  if (!found || ::access(found->c_str(), X_OK) != 0) return std::nullopt;
  return found;
}

std::string native_innermost(std::string_view text, pid_t tid) {
  std::string wanted = "TID " + std::to_string(tid) + ":";
  bool in_thread = false;
  std::string first_address;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    std::string_view line =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.substr(0, 4) == "TID ") {
      if (in_thread) break;  // the next thread: no named frame in ours
      in_thread = line == wanted;
      continue;
    }
    if (!in_thread || line.empty() || line.front() != '#') continue;
    // "#0  0x00007f34b8a5e503 clock_nanosleep@GLIBC_2.2.5"
    std::size_t address = line.find("0x");
    if (address == std::string_view::npos) continue;
    std::size_t space = line.find(' ', address);
    if (space == std::string_view::npos) {
      if (first_address.empty()) first_address = std::string(line.substr(address));
      continue;
    }
    std::size_t name = line.find_first_not_of(' ', space);
    if (name == std::string_view::npos) {
      if (first_address.empty()) first_address = std::string(line.substr(address, space - address));
      continue;
    }
    return std::string(line.substr(name));
  }
  return first_address;
}

native_stack_run::native_stack_run(asio::io_context& io, pid_t target,
                                   const native_stack_options& options,
                                   std::function<void(result)> done)
    : pipe_(io), deadline_(io), max_output_(options.max_output), buffer_(64 * 1024),
      done_(std::move(done)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result_.error = std::string("cannot make a pipe for eu-stack: ") + std::strerror(errno);
  } else {
    spawn_request request;
    request.program = options.eu_stack;
    request.args = {"-p", std::to_string(target)};
    // C locale: the output is parsed; no other variable of the agent's
    // matters to eu-stack.
    request.env = {{"LC_ALL", "C"}, {"PATH", "/usr/bin:/bin"}};
    request.stdout_fd = fds[1];
    request.stderr_fd = fds[1];
    spawn_result spawned = spawn_worker(request);
    ::close(fds[1]);  // ours: EOF comes when eu-stack's copy closes
    if (!spawned.ok()) {
      ::close(fds[0]);
      result_.error = spawned.error;
    } else {
      pid_ = spawned.pid;
      running_ = true;
      pipe_.assign(fds[0]);
    }
  }
  std::weak_ptr<int> alive = alive_;
  if (!running_) {
    asio::post(io, [this, alive] {
      if (alive.expired()) return;
      finish();
    });
    return;
  }
  deadline_.expires_after(options.deadline);
  deadline_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (alive.expired() || ec || !running_) return;
    result_.timed_out = true;
    // Its output then ends, and read() finishes.
    signal_group(pid_, SIGKILL);
  });
  read();
}

native_stack_run::~native_stack_run() {
  if (running_) signal_group(pid_, SIGKILL);
  boost::system::error_code ignored;
  deadline_.cancel();
  pipe_.close(ignored);
}

void native_stack_run::read() {
  std::weak_ptr<int> alive = alive_;
  pipe_.async_read_some(asio::buffer(buffer_), [this, alive](const boost::system::error_code& ec,
                                                             std::size_t n) {
    if (alive.expired()) return;
    if (n > 0) {
      std::size_t room = max_output_ > result_.text.size() ? max_output_ - result_.text.size() : 0;
      if (n > room) result_.truncated = true;
      result_.text.append(buffer_.data(), std::min(n, room));
    }
    if (ec) {  // EOF, or the pipe failed: either way eu-stack's output is over
      running_ = false;
      deadline_.cancel();
      boost::system::error_code ignored;
      pipe_.close(ignored);
      finish();
      return;
    }
    read();
  });
}

void native_stack_run::finish() {
  // Last: `done` may destroy this object.
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(result_));
}

}  // namespace dtrun::agent
