// Asks every worker for its stacks, on the agent's event loop: the Python
// stacks of all threads through the hook's faulthandler (python_hook.h),
// then the native stacks through eu-stack (native_stack.h), and writes
// each worker's combined text to a file.
//
// Nothing is polled and nothing sleeps: the end of a Python dump is seen
// by parsing the stack file on each inotify change (stack_dump.h's
// `complete`), the end of eu-stack's output by EOF. One deadline bounds
// the Python phase; dumps unfinished by then are taken as they are.
// A worker is signalled only when its stack file's last header names its
// pid: the signal is real-time, and one nobody handles kills the process.
// Single-threaded, like the agent; completion handlers do not throw.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/watch/native_stack.h"
#include "agent/watch/stack_dump.h"

namespace dtrun::agent {

struct capture_target {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;  // a live worker of the agent's, not yet reaped
  std::string stack_file;  // DTRUN_STACK_FILE given to it; empty: no hook
  std::string out_file;  // where the combined text goes; empty: nowhere
};

struct captured_stack {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool hooked = false;  // the hook's header named this pid: it was signalled
  bool complete = false;  // its Python dump was finished (hooked only)
  bool exited = false;  // the worker was gone (or a zombie) when asked
  std::string python_text;  // this capture's dump (no header), bounded
  std::optional<stack_frame> innermost;  // main thread's
  std::optional<stack_frame> innermost_user;
  std::string native_text;  // eu-stack's output, or why there is none
  std::string native_innermost;  // main thread's innermost native frame
  std::string error;  // out_file could not be written (one line)

  // Its part of hang_summary().
  rank_stack summary() const;
};

struct stack_capture_options {
  // How long the Python dumps may take; unfinished ones are then taken as
  // they are (complete=false). A dump takes milliseconds, unless the
  // process cannot run its signal handler (stopped, in the kernel).
  std::chrono::milliseconds python_deadline{3000};
  bool native = true;  // run eu-stack after the Python phase
  std::string path_list = "/usr/bin:/bin";  // where eu-stack is looked for
  std::chrono::milliseconds native_deadline{10000};  // per eu-stack run
  std::size_t max_native_output = 1 << 20;
  std::size_t max_python_text = 1 << 20;  // per worker, this capture's part
};

class stack_capture {
 public:
  using done_handler = std::function<void(std::vector<captured_stack>)>;

  stack_capture(boost::asio::io_context& io, stack_capture_options options = {});
  // Stops a capture under way: kills the eu-stack children still running,
  // and `done` is never called. Reaping them stays the agent's.
  ~stack_capture();

  stack_capture(const stack_capture&) = delete;
  stack_capture& operator=(const stack_capture&) = delete;

  // Captures every target and calls `done` once, from the event loop,
  // with one result per target in the same order (also when there are
  // none, posted). One capture at a time: throws std::logic_error when one
  // is under way. `done` may destroy this object.
  void capture(std::vector<capture_target> targets, done_handler done);

  bool busy() const { return static_cast<bool>(done_); }

  // The eu-stack children running now, which the agent's sweep of
  // adopted children must spare.
  std::vector<pid_t> helper_pids() const;

 private:
  void watch();
  void on_inotify();
  void check_python();
  bool read_dump(std::size_t index);
  void end_python();
  void start_native();
  void finish();

  boost::asio::io_context& io_;
  stack_capture_options options_;
  boost::asio::posix::stream_descriptor inotify_;
  boost::asio::steady_timer python_deadline_;
  std::vector<captured_stack> results_;
  std::vector<capture_target> targets_;
  std::vector<std::size_t> offsets_;  // stack file size when signalled
  std::vector<hook_header> headers_;
  std::vector<int> watches_;  // inotify watch per target, -1: none
  std::vector<std::unique_ptr<native_stack_run>> native_;
  std::size_t native_left_ = 0;
  bool python_phase_ = false;
  std::vector<char> events_;
  done_handler done_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace dtrun::agent
