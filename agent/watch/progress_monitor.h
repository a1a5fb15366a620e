// Hang detection's bookkeeping (--hang-timeout): when did a worker last
// show progress, and has any worker of the whole job shown some lately.
//
// Progress is any of: bytes of output the agent reads from a worker's pipe
// (progress(), called by the agent), a write to a worker's stdout.log or
// stderr.log when it writes them itself, a touch of its heartbeat file
// (DTRUN_HEARTBEAT_FILE), and a request through torch's file timer
// (progress(), called by the agent). Files are watched with inotify on the
// worker's folder, read on the event loop: nothing is polled.
//
// A hang is job-wide: on a multi-node job only rank 0 usually prints, so a
// node whose own workers are silent is not hung while another node's are
// not. Every tick (a quarter of the timeout, at most 30 s) the monitor tells
// the job whether this node progressed since the last tick and learns a
// job-wide counter that grows whenever any node did (share()); it declares
// a hang once neither this node nor the counter moved for the timeout. So a
// hang is reported between `timeout` and `timeout` + 2 ticks after the last
// progress anywhere (one tick for this node to hear of another's progress,
// one for the other node to tell).
//
// Single-threaded: every call and callback on the io_context's thread.
// Callbacks never run after the monitor is destroyed or stop()ped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

class progress_monitor {
 public:
  using clock = std::chrono::steady_clock;

  struct hooks {
    // Tells the job whether this node progressed since the last tick and
    // completes with the job's progress counter, which grows whenever any
    // node reported progress. May complete later on the loop, or never
    // (then no hang is declared from that tick).
    std::function<void(bool progressed, std::function<void(std::int64_t counter)> done)> share;
    // No progress anywhere in the job for at least the timeout: `idle` is
    // how long since the last progress this node knows of. Called once per
    // start_round(); the monitor is stopped when it is called.
    std::function<void(std::chrono::milliseconds idle)> hang;
    // A one-line problem (inotify unavailable): hang detection then relies
    // on piped output and the file timer only.
    std::function<void(const std::string&)> error;
  };

  // `timeout` > 0.
  progress_monitor(boost::asio::io_context& io, std::chrono::milliseconds timeout, hooks callbacks);
  ~progress_monitor();

  progress_monitor(const progress_monitor&) = delete;
  progress_monitor& operator=(const progress_monitor&) = delete;

  // The period of the job-wide check.
  std::chrono::milliseconds tick() const { return tick_; }

  // A new round of workers starts now (which counts as progress): forgets
  // the last round's folders and counter, and starts ticking.
  void start_round();

  // Watches local_rank's folder for writes to stdout.log / stderr.log and
  // for touches of `heartbeat_name` (created, written or its times set).
  void watch_rank_dir(int local_rank, const std::string& dir, const std::string& heartbeat_name);

  // Progress the agent saw itself (piped output, a file-timer request).
  void progress(int local_rank);

  // No more ticks and no hang (the round is over, or a hang is handled).
  void stop();

  // When local_rank last showed progress this round (its start if never).
  std::optional<clock::time_point> last_progress(int local_rank) const;

 private:
  void arm_tick();
  void on_tick();
  void read_events();
  void on_events(std::size_t bytes);
  void unwatch_all();

  boost::asio::io_context& io_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds tick_;
  hooks hooks_;
  generation_timer timer_;
  std::optional<boost::asio::posix::stream_descriptor> inotify_;
  std::vector<char> event_buffer_;
  struct watched_dir {
    int local_rank = 0;
    std::string heartbeat_name;
  };
  std::map<int, watched_dir> watches_;  // inotify watch descriptor -> rank
  std::map<int, clock::time_point> last_by_rank_;
  clock::time_point round_start_{};
  clock::time_point last_local_{};      // this node's last progress
  clock::time_point last_job_{};        // when the job counter last moved
  std::optional<std::int64_t> last_counter_;
  bool progressed_since_tick_ = false;
  bool running_ = false;
  std::uint64_t generation_ = 0;  // bumped by start_round() and stop(): a read of an older round is dropped
  std::shared_ptr<bool> alive_;
};

}  // namespace dtrun::agent
