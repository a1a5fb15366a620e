// A worker's native stacks, from elfutils' eu-stack run as a child of the
// agent, read on the agent's event loop.
//
// Completion is the end of eu-stack's output (EOF on the pipe), never its
// exit status: the agent's SIGCHLD handler reaps every child with
// waitpid(-1), eu-stack included, so this code never waits for it and
// tolerates that it is already reaped. eu-stack stops every thread of the
// target with ptrace while it unwinds (docs/stacks-notes.md: how long),
// so it must not run while a faulthandler dump is being asked for: a
// signal that arrives while the target is traced is reported to the
// tracer and eu-stack's detach drops it. Completion handlers do not throw.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dtrun::agent {

// What is said instead of a native stack when eu-stack is missing.
constexpr const char* eu_stack_missing = "eu-stack not installed (apt-get install elfutils)";

// eu-stack's path, looked up in `path_list` (colon-separated, as PATH);
// nullopt when it is not there.
std::optional<std::string> find_eu_stack(const std::string& path_list);

// The innermost frame of thread `tid` in eu-stack's output
// ("TID <tid>:" then "#0  0x... function"): the first frame that names a
// function, else the first frame's address; empty when the thread is not
// there.
std::string native_innermost(std::string_view eu_stack_text, pid_t tid);

struct native_stack_options {
  std::string eu_stack;  // the program's path (find_eu_stack)
  std::chrono::milliseconds deadline{10000};  // then it is killed
  std::size_t max_output = 1 << 20;  // bytes kept; the rest is read and dropped
};

// One eu-stack run against one process.
class native_stack_run {
 public:
  struct result {
    std::string text;  // stdout and stderr as they came, up to max_output
    bool timed_out = false;  // killed at the deadline
    bool truncated = false;  // more than max_output
    std::string error;  // it could not be started (one line); text is empty
  };

  // Starts `options.eu_stack -p <target>` in its own process group with a
  // parent-death signal (spawn_worker) and calls `done` once, from the
  // event loop, after EOF on its output (or at once, posted, if it could
  // not start). Not called after this object is destroyed.
  native_stack_run(boost::asio::io_context& io, pid_t target, const native_stack_options& options,
                   std::function<void(result)> done);
  // Kills eu-stack's process group if its output has not ended yet (the
  // target is then detached by the kernel). Reaping stays the agent's.
  ~native_stack_run();

  native_stack_run(const native_stack_run&) = delete;
  native_stack_run& operator=(const native_stack_run&) = delete;

  // eu-stack's pid until its output ended, else -1 (for the agent's sweep
  // of adopted children, which must spare it).
  pid_t running_pid() const { return running_ ? pid_ : -1; }

 private:
  void read();
  void finish();

  boost::asio::posix::stream_descriptor pipe_;
  boost::asio::steady_timer deadline_;
  pid_t pid_ = -1;
  bool running_ = false;
  std::size_t max_output_;
  result result_;
  std::vector<char> buffer_;
  std::function<void(result)> done_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace dtrun::agent
