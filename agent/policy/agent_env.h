// What the agent's policy asks of the machine, behind one seam (issue 47;
// docs/design.md, "The agent: policy and parts"): the clocks, the files it
// reads for decisions (--progress-file), the OOM killer's count, the GPUs
// (the one NVML session of the agent) and the host name lookup. The agent
// gets one as it gets a process_runner: the real one (system_agent_env)
// by default, a fake in the unit tests (tests/unit/agent/fake_agent_env.h),
// so incidents, goodput, the no-progress count, the OOM proof and GPU
// reclaim have policy tests without a machine that fails that way.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "agent/devices/nvml_api.h"

namespace dtrun::agent {

class agent_env {
 public:
  virtual ~agent_env() = default;

  // The wall clock (incidents' times, quarantine records, watchdog
  // lateness) and the monotonic one (productive and lost time).
  virtual std::chrono::system_clock::time_point wall_now() = 0;
  virtual std::chrono::steady_clock::time_point steady_now() = 0;

  // --progress-file's step; nullopt with `problem` set when it cannot be
  // read (restart_policy.h, read_progress_file).
  virtual std::optional<std::int64_t> progress_step(const std::string& file,
                                                    std::string& problem) = 0;

  // The OOM killer's count for the agent's memory cgroup (oom_count.h),
  // where its workers start; nullopt: no count on this machine.
  virtual std::optional<std::uint64_t> oom_kills() = 0;

  // The agent's NVML session, opened on the first call and kept: the GPU
  // checks, the machine's key, the reclaim and `dtrun status` share it.
  // Not available() without a driver.
  virtual nvml_session& nvml() = 0;

  // Resolves this machine's name and calls `warn` when gloo would bind to
  // a loopback address (host_name_check.h); asynchronous on `io`.
  virtual void check_host_name(boost::asio::io_context& io,
                               std::function<void(std::string)> warn) = 0;
};

// The machine itself.
std::unique_ptr<agent_env> system_agent_env();

}  // namespace dtrun::agent
