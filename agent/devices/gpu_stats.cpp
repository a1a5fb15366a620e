#include "agent/devices/gpu_stats.h"

#include <algorithm>

#include <fmt/format.h>

namespace dtrun::agent {

namespace {

// More processes on one GPU than anyone runs; bounds what we allocate.
constexpr unsigned int max_processes = 4096;

}  // namespace

gpu_stats::gpu_stats(const nvml_session& nvml, const log_fn& debug) : fns_(nvml.fns()) {
  if (!nvml.available()) {
    debug(fmt::format("gpu stats: {}; no GPU figures", nvml.why_unavailable()));
    return;
  }
  if (!fns_.compute_processes) {
    debug("gpu stats: NVML lacks an entry point dtrun needs (driver older than CUDA 11?); "
          "no GPU figures");
    return;
  }
  available_ = true;
}

std::map<pid_t, double> gpu_stats::new_utilization(unsigned int index, nvml::device_t device) {
  std::map<pid_t, double> fresh;
  if (!fns_.process_utilization) return fresh;
  unsigned long long since = last_seen_[index];
  unsigned int samples = 0;
  auto rc = fns_.process_utilization(device, nullptr, &samples, since);
  if (rc != nvml::error_insufficient_size || samples == 0) return fresh;
  samples = std::min(samples, max_processes);
  std::vector<nvml::process_utilization_sample_t> buffer(samples);
  if (fns_.process_utilization(device, buffer.data(), &samples, since) != nvml::success) {
    return fresh;
  }
  buffer.resize(std::min<std::size_t>(samples, buffer.size()));
  // Several samples of one process in the window: the highest counts.
  for (const auto& sample : buffer) {
    last_seen_[index] = std::max(last_seen_[index], sample.time_stamp);
    double util = std::min(100u, sample.sm_util);
    auto& slot = fresh[static_cast<pid_t>(sample.pid)];
    slot = std::max(slot, util);
  }
  return fresh;
}

gpu_snapshot gpu_stats::sample() {
  gpu_snapshot snap;
  if (!available_) return snap;
  unsigned int count = 0;
  if (fns_.device_count(&count) != nvml::success) return snap;
  for (unsigned int i = 0; i < std::min(count, 1024u); ++i) {
    nvml::device_t device = nullptr;
    if (fns_.device_by_index(i, &device) != nvml::success) continue;
    gpu_device_usage d;
    d.index = i;
    nvml::utilization_t u{};
    if (fns_.utilization_rates && fns_.utilization_rates(device, &u) == nvml::success) {
      d.utilization_percent = u.gpu;
    }
    nvml::memory_t m{};
    if (fns_.memory_info && fns_.memory_info(device, &m) == nvml::success) {
      d.memory_used = m.used;
      d.memory_total = m.total;
    }
    snap.devices.push_back(d);

    auto processes = nvml::compute_processes_on(fns_, device);
    for (const auto& p : processes) {
      auto& usage = snap.processes[static_cast<pid_t>(p.pid)];
      if (p.used_gpu_memory != nvml::value_not_available) usage.memory_bytes += p.used_gpu_memory;
    }

    // A process NVML has no new sample for (the window since the last look
    // was too short for one) keeps its last figure while it still runs on
    // the device, instead of reading as idle: two looks a moment apart
    // (`dtrun status`, then /metrics) see the same utilisation.
    auto fresh = new_utilization(i, device);
    std::map<pid_t, double> current;
    for (const auto& p : processes) {
      auto pid = static_cast<pid_t>(p.pid);
      if (auto it = last_utilization_[i].find(pid); it != last_utilization_[i].end()) {
        current[pid] = it->second;
      }
    }
    for (const auto& [pid, util] : fresh) current[pid] = util;
    last_utilization_[i] = current;  // processes gone from the device are forgotten
    for (const auto& [pid, util] : current) {
      auto& usage = snap.processes[pid];
      usage.utilization_percent = std::max(usage.utilization_percent.value_or(0.0), util);
    }
  }
  return snap;
}

std::optional<gpu_process_usage> gpu_stats::usage_of(const gpu_snapshot& snapshot,
                                                     const std::vector<pid_t>& pids) {
  std::optional<gpu_process_usage> total;
  for (pid_t pid : pids) {
    auto it = snapshot.processes.find(pid);
    if (it == snapshot.processes.end()) continue;
    if (!total) total.emplace();
    total->memory_bytes += it->second.memory_bytes;
    if (it->second.utilization_percent) {
      total->utilization_percent =
          std::max(total->utilization_percent.value_or(0.0), *it->second.utilization_percent);
    }
  }
  return total;
}

}  // namespace dtrun::agent
