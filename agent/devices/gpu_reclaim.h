// Whether this node's GPUs were given back after its workers were stopped,
// before the next round starts on them (--gpu-reclaim-timeout): no process
// of the previous round still holds one, and each one's memory is back to
// within a tolerance of its level before the first round. A worker stuck
// in uninterruptible sleep (state D) keeps its GPU memory until a reboot,
// and memory the driver never freed stays used: either makes every later
// round fail with "CUDA out of memory" or "device busy", so the node
// leaves, with the reason, instead of burning restarts on it.
//
// NVML names processes by host pid: in a container with its own pid
// namespace the pids never match, and the memory level is what tells.
// No driver (no NVML): reclaimed at once.
//
// On the agent's event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/devices/nvml_api.h"

namespace dtrun::agent {

// Memory used per GPU (NVML index -> bytes), taken before the first round.
using gpu_memory_levels = std::map<unsigned int, std::uint64_t>;

// The memory used now on `devices` (every GPU when empty); a GPU whose
// figure NVML does not give is left out. Empty without NVML.
gpu_memory_levels read_gpu_memory_levels(nvml_session& nvml,
                                         const std::vector<unsigned int>& devices);

struct gpu_holder {
  unsigned int device = 0;  // NVML index
  pid_t pid = 0;
};

struct gpu_memory_excess {
  unsigned int device = 0;
  std::uint64_t bytes_above = 0;  // above the baseline (tolerance not subtracted)
};

// One look at the GPUs after a stop.
struct gpu_reclaim_state {
  std::vector<gpu_holder> holders;       // previous round's pids still on a GPU
  std::vector<gpu_memory_excess> excess;  // GPUs above baseline + tolerance
  bool reclaimed() const { return holders.empty() && excess.empty(); }
};

// Default tolerance: what the driver's own bookkeeping of a GPU may move by
// between a job's start and end (a CUDA context alone is ~500 MiB).
inline constexpr std::uint64_t default_gpu_reclaim_tolerance = 1ull << 30;

// Looks once: which of `previous_pids` (the previous round's workers and
// their process groups' members) still hold one of `devices` (every GPU
// when empty), and which GPU's memory used is above `baseline` +
// `tolerance` (a GPU without a baseline is not judged by memory).
gpu_reclaim_state sample_gpu_reclaim(nvml_session& nvml, const std::vector<unsigned int>& devices,
                                     const std::vector<pid_t>& previous_pids,
                                     const gpu_memory_levels& baseline, std::uint64_t tolerance);

// One line for a state that is not reclaimed `waited` after the stop:
// "GPU 1 still held by pid 4242 (state D) 31 s after the workers were
// stopped: this node leaves the job (check: nvidia-smi; a process in state
// D needs a reboot)". `state_of` gives a pid's state letter ('?':
// unknown; kill_watch.h's process_state reads it from /proc).
std::string describe_unreclaimed(const gpu_reclaim_state& state, std::chrono::milliseconds waited,
                                 const std::function<char(pid_t)>& state_of);

// Waits, bounded, until the GPUs are reclaimed. There is no event to wait
// on for an external resource like this (NVML has none for "memory
// freed" or "process left the GPU"), so it re-samples on a steady timer
// every `interval` until reclaimed or `timeout`.
class gpu_reclaim_waiter {
 public:
  struct options {
    std::vector<unsigned int> devices;  // NVML indexes; empty: every GPU
    std::vector<pid_t> previous_pids;
    gpu_memory_levels baseline;
    std::uint64_t tolerance = default_gpu_reclaim_tolerance;
    std::chrono::milliseconds timeout = std::chrono::seconds(30);  // --gpu-reclaim-timeout
    std::chrono::milliseconds interval = std::chrono::milliseconds(100);
    // A pid's state letter, for the reason; empty: process_state (/proc).
    std::function<char(pid_t)> state_of;
  };
  struct result {
    bool reclaimed = true;
    std::string reason;  // one line when not reclaimed
    gpu_reclaim_state last;  // the last look
  };
  using done_fn = std::function<void(result)>;

  // `nvml` (possibly unavailable) must outlive the waiter.
  gpu_reclaim_waiter(boost::asio::io_context& io, nvml_session& nvml);

  // Calls `done` once, on the loop, never from inside start(): reclaimed
  // at the first clean look (at once without NVML), else not reclaimed
  // with the reason after `timeout`. A wait in flight is cancelled first.
  void start(options opts, done_fn done);
  // Stops a wait in flight; its `done` is not called. Idempotent.
  void cancel();

 private:
  void look();

  nvml_session& nvml_;
  boost::asio::steady_timer timer_;
  options opts_;
  done_fn done_;
  std::chrono::steady_clock::time_point started_;
  // Bumped by start() and cancel(): a handler of an older wait does nothing.
  std::uint64_t generation_ = 0;
};

}  // namespace dtrun::agent
