#include "agent/devices/gpu_reclaim.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "agent/process/kill_watch.h"

namespace dtrun::agent {

namespace {


std::vector<unsigned int> devices_to_look_at(nvml_session& nvml,
                                             const std::vector<unsigned int>& devices) {
  if (!devices.empty()) return devices;
  std::vector<unsigned int> all;
  unsigned int count = 0;
  if (nvml.fns().device_count(&count) != nvml::success) return all;
  for (unsigned int i = 0; i < std::min(count, 1024u); ++i) all.push_back(i);
  return all;
}

// The pids of the compute processes on `device`; empty when NVML fails.
std::vector<pid_t> processes_on(const nvml::functions& f, nvml::device_t device) {
  std::vector<pid_t> pids;
  for (const auto& p : nvml::compute_processes_on(f, device)) {
    pids.push_back(static_cast<pid_t>(p.pid));
  }
  return pids;
}

std::string bytes_text(std::uint64_t bytes) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / gib);
  return fmt::format("{} MiB", bytes >> 20);
}

}  // namespace

gpu_memory_levels read_gpu_memory_levels(nvml_session& nvml,
                                         const std::vector<unsigned int>& devices) {
  gpu_memory_levels levels;
  if (!nvml.available() || !nvml.fns().memory_info) return levels;
  for (unsigned int index : devices_to_look_at(nvml, devices)) {
    nvml::device_t device = nullptr;
    if (nvml.fns().device_by_index(index, &device) != nvml::success) continue;
    nvml::memory_t m{};
    if (nvml.fns().memory_info(device, &m) == nvml::success) levels[index] = m.used;
  }
  return levels;
}

gpu_reclaim_state sample_gpu_reclaim(nvml_session& nvml, const std::vector<unsigned int>& devices,
                                     const std::vector<pid_t>& previous_pids,
                                     const gpu_memory_levels& baseline, std::uint64_t tolerance) {
  gpu_reclaim_state state;
  if (!nvml.available()) return state;
  const auto& f = nvml.fns();
  std::set<pid_t> previous(previous_pids.begin(), previous_pids.end());
  for (unsigned int index : devices_to_look_at(nvml, devices)) {
    nvml::device_t device = nullptr;
    // A GPU NVML cannot open now is the health check's to judge, not a
    // sign that the previous round holds it.
    if (f.device_by_index(index, &device) != nvml::success) continue;
    for (pid_t pid : processes_on(f, device)) {
      if (previous.count(pid)) state.holders.push_back({index, pid});
    }
    auto level = baseline.find(index);
    nvml::memory_t m{};
    if (level != baseline.end() && f.memory_info && f.memory_info(device, &m) == nvml::success &&
        m.used > level->second + tolerance) {
      state.excess.push_back({index, m.used - level->second});
    }
  }
  return state;
}

std::string describe_unreclaimed(const gpu_reclaim_state& state, std::chrono::milliseconds waited,
                                 const std::function<char(pid_t)>& state_of) {
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  std::vector<std::string> parts;
  bool stuck = false;
  if (!state.holders.empty()) {
    // Per GPU: its holders, each with its state when known.
    std::map<unsigned int, std::vector<std::string>> by_device;
    for (const auto& h : state.holders) {
      char s = state_of ? state_of(h.pid) : '?';
      stuck = stuck || s == 'D';
      by_device[h.device].push_back(s != '?' ? fmt::format("{} (state {})", h.pid, s)
                                      : std::to_string(h.pid));
    }
    for (const auto& [device, pids] : by_device) {
      std::string list;
      for (const auto& p : pids) list += (list.empty() ? "" : ", ") + p;
      parts.push_back(fmt::format("GPU {} still held by pid{} {}", device,
                                  pids.size() == 1 ? "" : "s", list));
    }
  }
  for (const auto& e : state.excess) {
    parts.push_back(fmt::format("GPU {} memory {} above its level before the job", e.device,
                                bytes_text(e.bytes_above)));
  }
  std::string what;
  for (const auto& p : parts) what += (what.empty() ? "" : "; ") + p;
  return fmt::format("{} {} s after the workers were stopped: this node leaves the job "
                     "(check: nvidia-smi{})",
                     what, seconds, stuck ? "; a process in state D needs a reboot" : "");
}

gpu_reclaim_waiter::gpu_reclaim_waiter(boost::asio::io_context& io, nvml_session& nvml)
    : nvml_(nvml), timer_(io) {}

void gpu_reclaim_waiter::start(options opts, done_fn done) {
  cancel();
  opts_ = std::move(opts);
  done_ = std::move(done);
  started_ = std::chrono::steady_clock::now();
  // The first look goes through the timer too, not inline: `done` is never
  // called from inside start(), and a waiter destroyed first cancels it.
  timer_.expires_after(std::chrono::milliseconds(0));
  timer_.async_wait([this, generation = generation_](const boost::system::error_code& ec) {
    if (ec || generation != generation_) return;
    look();
  });
}

void gpu_reclaim_waiter::cancel() {
  ++generation_;
  timer_.cancel();
}

void gpu_reclaim_waiter::look() {
  auto state = sample_gpu_reclaim(nvml_, opts_.devices, opts_.previous_pids, opts_.baseline,
                                  opts_.tolerance);
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started_);
  if (state.reclaimed() || waited >= opts_.timeout) {
    result r;
    r.reclaimed = state.reclaimed();
    if (!r.reclaimed) {
      auto state_of = opts_.state_of ? opts_.state_of
                                     : std::function<char(pid_t)>([](pid_t pid) {
                                         return process_state(pid);
                                       });
      r.reason = describe_unreclaimed(state, waited, state_of);
    }
    r.last = std::move(state);
    ++generation_;  // this wait is over
    auto done = std::move(done_);
    done_ = nullptr;
    done(std::move(r));
    return;
  }
  // Not yet: look again after `interval` (or at the deadline, if sooner).
  timer_.expires_after(std::min(opts_.interval, opts_.timeout - waited));
  timer_.async_wait([this, generation = generation_](const boost::system::error_code& ec) {
    if (ec || generation != generation_) return;
    look();
  });
}

}  // namespace dtrun::agent
