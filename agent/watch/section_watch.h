// --section-timeouts: the watch that names a rank that overstays its
// section (docs/agent.md, "Section timeouts").
//
// On a tick (a quarter of the shortest timeout given, from 100 ms to 1 s:
// a few reads of shared memory, no system call), the watch reads each
// worker's progress page (progress_page.h), feeds the learner the
// intervals it has not seen (section_learner.h), and checks the section
// each rank is in now against that section's timeout, fixed or learned.
// So a rank that overstays is named between `timeout` and `timeout` + one
// tick after it entered the section (or, for "step", after its last
// dtrun.step() call or the end of its last section, whichever is later:
// time in a section is not charged to the step around it).
//
// Single-threaded: every call and callback on the io_context's thread;
// callbacks never run after stop() or the watch's end.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/spec/section_timeouts.h"
#include "agent/watch/progress_page.h"
#include "agent/watch/section_learner.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

// A rank past its section's timeout.
struct section_overstay {
  int local_rank = 0;
  std::string section;
  std::chrono::milliseconds elapsed{0};
  std::chrono::milliseconds timeout{0};
  bool learned = false;  // the timeout was `auto`'s
};

// The timeout of `section` now: the fixed one, the learned one, or none
// (not named in the flag, or `auto` with too little learned yet).
std::optional<std::chrono::milliseconds> timeout_of(const std::string& section,
                                                    const section_timeouts& timeouts,
                                                    const section_learner& learner);

// Whether the rank whose page is `page` is past its current section's
// timeout at `now_ns` (CLOCK_MONOTONIC).
std::optional<section_overstay> overstayed(int local_rank, const progress_snapshot& page,
                                           std::int64_t now_ns, const section_timeouts& timeouts,
                                           const section_learner& learner);

// Feeds `learner` the intervals of `page` not seen yet; `seen` holds, by
// slot, the count already read (grown as needed). Returns how many were fed.
std::size_t learn_from(const progress_snapshot& page, std::vector<std::uint64_t>& seen,
                       section_learner& learner);

class section_watch {
 public:
  struct hooks {
    // local_rank's page now (nullopt: none, or not its worker's yet).
    std::function<std::optional<progress_snapshot>(int local_rank)> read;
    // A rank overstayed: called once per start_round(); the watch is
    // stopped when it is called.
    std::function<void(const section_overstay&)> overstayed;
    // A learned timeout changed (to the second): time to save the learner.
    std::function<void()> learned;
  };

  section_watch(boost::asio::io_context& io, section_timeouts timeouts, section_learner& learner,
                hooks callbacks);

  std::chrono::milliseconds tick() const { return tick_; }

  // The round's workers run now: watch these local ranks.
  void start_round(std::vector<int> local_ranks);
  // No more ticks (the round is over, or an overstay is handled).
  void stop();

 private:
  void on_tick();

  section_timeouts timeouts_;
  section_learner& learner_;
  hooks hooks_;
  std::chrono::milliseconds tick_;
  generation_timer timer_;
  std::map<int, std::vector<std::uint64_t>> seen_;  // by local rank
  std::map<std::string, std::optional<std::int64_t>> learned_s_;  // what was last said saved
};

}  // namespace dtrun::agent
