// torchrun's file-based watchdog (LocalElasticAgent._setup_local_watchdog
// with TORCHELASTIC_ENABLE_FILE_TIMER=1): workers register deadlines with
// torch.distributed.elastic.timer.FileTimerClient through a named pipe,
// and a worker whose deadline passed is sent the signal it asked for.
//
// On the agent's event loop: the pipe is read with a stream_descriptor
// (the agent holds a write end itself, so the reader never sees EOF), and
// one timer is armed for the earliest deadline; nothing is polled.
// Unlike torch's server, which signals any pid a request names, only the
// agent's own live workers are ever signalled: a request for another pid
// is ignored, since any local process of the user can write to the pipe.
// Memory is bounded (line length, number of timers); a bad line is logged
// (the first one at error level, later ones at debug) and ignored.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/watch/timer_request.h"
#include "agent/watch/timer_table.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

// What the agent's environment asks for (torch reads the same variables).
struct file_timer_config {
  bool enabled = false;  // TORCHELASTIC_ENABLE_FILE_TIMER is exactly "1"
  std::string path;      // TORCHELASTIC_TIMER_FILE; empty: the agent makes one
};
file_timer_config file_timer_from_env(const env_map& env);

class file_timer {
 public:
  static constexpr std::size_t default_max_timers = 4096;

  struct hooks {
    // Whether `pid` is a live (not yet reaped) worker of this agent.
    std::function<bool(pid_t)> is_worker;
    // A live worker's deadline passed with a signal to send: the agent
    // sends it (and says so).
    std::function<void(const timer_table::expired&)> expire;
    std::function<void(const std::string&)> error;  // one log line
    std::function<void(const std::string&)> debug;  // one log line
    // A well-formed request (a deadline set or released) from `pid`: hang
    // detection counts it as progress. May be empty.
    std::function<void(pid_t)> request;
  };

  // Makes the pipe at `path` (mode 0600) and opens it. An existing named
  // pipe there that nobody reads is replaced (as torch does); one that a
  // process reads (another job's watchdog) and any other file are left
  // alone and are an error. Throws std::runtime_error with a one-line
  // message that names the variable and what to do.
  file_timer(boost::asio::io_context& io, std::string path, hooks h,
             std::size_t max_timers = default_max_timers);
  // Closes the pipe and removes it, unless `path` no longer names the
  // pipe this object made (someone replaced it: theirs stays).
  ~file_timer();

  file_timer(const file_timer&) = delete;
  file_timer& operator=(const file_timer&) = delete;

  const std::string& path() const { return path_; }

  // A worker ended: its timers go (a new process may get its pid).
  void forget(pid_t pid);
  // The round ended: every timer goes.
  void forget_all();

 private:
  void read();
  void on_line(const timer_line_splitter::line& line);
  void bad_line(const std::string& why);
  void rearm();
  void on_deadline();

  std::string path_;
  hooks hooks_;
  boost::asio::posix::stream_descriptor reader_;
  int writer_ = -1;
  dev_t device_ = 0;  // the pipe we made, to remove only that one
  ino_t inode_ = 0;
  generation_timer deadline_;  // an old expiry is ignored
  timer_table table_;
  timer_line_splitter splitter_;
  std::vector<char> buffer_;
  bool said_bad_line_ = false;
  bool said_not_worker_ = false;
  bool said_full_ = false;
  // Handlers hold a weak_ptr to it: a completion queued before this object
  // was destroyed must not touch it.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace dtrun::agent
