// The workers' stacks on request (`dtrun stacks`, a hang's report): one
// capture at a time (stack_capture.h); requests that come while one is
// under way share its result. Capture n of a round writes each live
// worker's stacks to <run dir>/attempt_<round>/<local rank>/stacks-<n>.txt.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/process/worker_group.h"
#include "agent/watch/stack_capture.h"

namespace dtrun::agent {

class worker_stacks {
 public:
  using done_handler = std::function<void(const std::vector<captured_stack>&)>;

  // `hook_dir` empty: the workers have no start-up hook (no Python stacks).
  worker_stacks(boost::asio::io_context& io, stack_capture_options options, std::string run_dir,
                std::string hook_dir);

  // Every live worker's stacks, then `done` (from the event loop).
  void capture(const std::vector<worker>& workers, std::int64_t round, done_handler done);

  // local_rank's file of the latest capture of `round`; -1: the pattern
  // (".../<local_rank>/stacks-3.txt"), for messages.
  std::string file(std::int64_t round, int local_rank) const;

  // A capture wrote stacks-<n>.txt files (they outlive a temporary run
  // folder: dtrun named them).
  bool written() const { return written_; }

  // The eu-stack children running now (the sweep of adopted children
  // spares them).
  std::vector<pid_t> helper_pids() const;

  // Ends a capture under way (its eu-stack children killed); waiters are
  // not called.
  void stop();

 private:
  std::optional<stack_capture> capture_;
  std::string run_dir_;
  std::string hook_dir_;
  std::vector<done_handler> waiters_;
  int captures_ = 0;
  bool written_ = false;
};

}  // namespace dtrun::agent
