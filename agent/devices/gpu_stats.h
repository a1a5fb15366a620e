// Per-process GPU figures from NVIDIA's NVML, for `dtrun status` and the
// metrics, read through the agent's one NVML session (agent/devices/nvml_api.h: loaded
// at run time with dlopen, no NVIDIA headers): a machine without the
// driver simply has no GPU figures.
//
// Not thread-safe; one instance per agent, used on its event loop. A
// sample costs a few NVML calls per device (milliseconds), so sample at
// the status/metrics rate, not per line of output.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/devices/nvml_api.h"

namespace dtrun::agent {

struct gpu_device_usage {
  unsigned int index = 0;
  std::optional<unsigned int> utilization_percent;
  std::uint64_t memory_used = 0;
  std::uint64_t memory_total = 0;
};

struct gpu_process_usage {
  std::uint64_t memory_bytes = 0;  // summed over devices
  // The highest SM share on any device over the last interval; nullopt
  // when NVML had no sample for the process (idle, or not supported).
  std::optional<double> utilization_percent;
};

struct gpu_snapshot {
  std::vector<gpu_device_usage> devices;
  std::map<pid_t, gpu_process_usage> processes;  // by host pid, as NVML sees them
};

class gpu_stats {
 public:
  using log_fn = std::function<void(const std::string&)>;

  // On the agent's NVML session (opened once per agent, agent_env.h),
  // which must outlive this. When NVML is not there, available() is false
  // and `debug` got one line.
  gpu_stats(const nvml_session& nvml, const log_fn& debug);

  gpu_stats(const gpu_stats&) = delete;
  gpu_stats& operator=(const gpu_stats&) = delete;

  bool available() const { return available_; }

  // Every device and every compute process on it. Utilisation is over the
  // time since the previous sample (NVML keeps a short history); a process
  // with no newer sample keeps its last figure while it is on the device. Empty
  // when unavailable; a device whose calls fail is skipped.
  gpu_snapshot sample();

  // The usage of a set of pids (a worker's process group) in `snapshot`:
  // memory summed, utilisation the highest (nullopt when none of the pids
  // is on a GPU).
  static std::optional<gpu_process_usage> usage_of(const gpu_snapshot& snapshot,
                                                   const std::vector<pid_t>& pids);

 private:
  // Device `index`'s samples newer than the last seen: pid -> highest SM %.
  std::map<pid_t, double> new_utilization(unsigned int index, nvml::device_t device);

  nvml::functions fns_;
  bool available_ = false;
  std::map<unsigned int, unsigned long long> last_seen_;  // per device, NVML µs
  // Per device: each process's last utilisation, kept while it runs there.
  std::map<unsigned int, std::map<pid_t, double>> last_utilization_;
};

}  // namespace dtrun::agent
