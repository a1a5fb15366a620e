#include "agent/health/gpu_health.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace dtrun::agent {

namespace {

// Events kept per device: the first ones name the failure; the count of a
// GPU spewing XIDs must not grow the agent's memory.
constexpr std::size_t max_xids_per_device = 16;
// Events read in one drain; the rest wait for the next check.
constexpr int max_events_per_drain = 1024;

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

std::string row_remapper_command(unsigned int index) {
  return fmt::format("nvidia-smi -q -d ROW_REMAPPER -i {}", index);
}

std::string page_retirement_command(unsigned int index) {
  return fmt::format("nvidia-smi -q -d PAGE_RETIREMENT -i {}", index);
}

std::string xid_list(const std::vector<unsigned long long>& xids) {
  std::vector<std::string> parts;
  for (auto xid : xids) parts.push_back(std::to_string(xid));
  return join(parts, ", ");
}

}  // namespace

bool xid_is_application_error(unsigned long long xid) {
  // NVIDIA's XID catalogue: 13 graphics engine exception, 31 GPU memory
  // page fault, 43 GPU stopped processing (a kernel killed), 45 preemptive
  // clean-up (its process was stopped: the agent's own restarts cause it).
  return xid == 13 || xid == 31 || xid == 43 || xid == 45;
}

gpu_health::gpu_health(nvml_session& nvml) : nvml_(nvml) {
  if (!nvml_.available()) return;
  register_for_xids();
}

gpu_health::~gpu_health() {
  if (events_ && nvml_.fns().event_set_free) nvml_.fns().event_set_free(events_);
}

void gpu_health::add_note(const std::string& line) {
  if (std::find(notes_.begin(), notes_.end(), line) == notes_.end()) notes_.push_back(line);
}

void gpu_health::register_for_xids() {
  const auto& f = nvml_.fns();
  if (!f.event_set_create || !f.register_events || !f.event_set_wait || !f.event_set_free) {
    add_note("NVML lacks the event entry points (nvmlEventSetWait_v2): XIDs not watched");
    return;
  }
  if (auto rc = f.event_set_create(&events_); rc != nvml::success) {
    events_ = nullptr;
    add_note(fmt::format("nvmlEventSetCreate failed with code {}: XIDs not watched", rc));
    return;
  }
  unsigned int count = 0;
  if (f.device_count(&count) != nvml::success) count = 0;
  for (unsigned int i = 0; i < std::min(count, 1024u); ++i) {
    nvml::device_t device = nullptr;
    if (f.device_by_index(i, &device) != nvml::success) continue;
    auto rc = f.register_events(device, nvml::event_type_xid_critical_error, events_);
    if (rc != nvml::success) {
      // Not supported on some GPUs (GeForce before Pascal); the others
      // are still watched.
      add_note(fmt::format("GPU {}: XID events not supported (code {}): its XIDs not watched",
                           i, rc));
      continue;
    }
    registered_.insert(device);
  }
}

void gpu_health::drain_events() {
  if (!events_) return;
  for (int n = 0; n < max_events_per_drain; ++n) {
    nvml::event_data_t data{};
    // Timeout 0: returns at once with error_timeout when nothing is queued.
    if (nvml_.fns().event_set_wait(events_, &data, 0) != nvml::success) return;
    if (!(data.event_type & nvml::event_type_xid_critical_error)) continue;
    if (xid_is_application_error(data.event_data)) continue;
    if (!registered_.count(data.device)) continue;
    auto& seen = xids_[data.device];
    if (seen.size() < max_xids_per_device) seen.push_back(data.event_data);
  }
}

std::string gpu_health::memory_repair_failure(unsigned int index, nvml::device_t device) {
  const auto& f = nvml_.fns();
  unsigned int architecture = nvml::architecture_unknown;
  if (f.architecture && f.architecture(device, &architecture) != nvml::success) {
    architecture = nvml::architecture_unknown;
  }
  // Before Ampere (A100) GPUs retire pages; from it on they remap rows.
  // Unknown (or no nvmlDeviceGetArchitecture): remapped rows first, and
  // retired pages where the GPU does not remap.
  bool before_ampere = architecture < nvml::architecture_ampere;
  if (!before_ampere && f.remapped_rows) {
    unsigned int corrected = 0, uncorrected = 0, pending = 0, failure = 0;
    auto rc = f.remapped_rows(device, &corrected, &uncorrected, &pending, &failure);
    if (rc == nvml::success) {
      if (failure) {
        return fmt::format("GPU {} failed to remap a memory row ({} rows remapped for "
                           "uncorrectable errors; the GPU needs service; check: {})",
                           index, uncorrected, row_remapper_command(index));
      }
      if (pending) {
        return fmt::format("GPU {} has a row remapping pending (it takes effect at the next "
                           "GPU reset or reboot; check: {})",
                           index, row_remapper_command(index));
      }
      return {};
    }
    if (rc != nvml::error_not_supported) {
      add_note(fmt::format("GPU {}: nvmlDeviceGetRemappedRows failed with code {}: rows not "
                           "checked", index, rc));
      return {};
    }
    // Not supported: a GPU without row remapping (GDDR); try pages.
  } else if (!before_ampere) {
    add_note("NVML lacks nvmlDeviceGetRemappedRows: row remapping not checked");
    return {};
  }
  if (!f.retired_pages_pending) {
    add_note("NVML lacks nvmlDeviceGetRetiredPagesPendingStatus: page retirement not checked");
    return {};
  }
  int pending = 0;
  auto rc = f.retired_pages_pending(device, &pending);
  if (rc == nvml::success && pending == nvml::feature_enabled) {
    return fmt::format("GPU {} has retired memory pages pending (they take effect at the next "
                       "GPU reset or reboot; check: {})",
                       index, page_retirement_command(index));
  }
  // error_not_supported: a GPU with neither (GeForce); nothing to judge.
  return {};
}

std::vector<expected_gpu> expected_gpus(const std::vector<accelerator>& visible) {
  std::vector<expected_gpu> gpus;
  for (const auto& a : visible) {
    gpus.push_back({static_cast<unsigned int>(a.physical_index), a.pci_address});
  }
  return gpus;
}

std::vector<accelerator> nvml_gpus(nvml_session& nvml) {
  std::vector<accelerator> gpus;
  unsigned int count = 0;
  if (!nvml.available() || nvml.fns().device_count(&count) != nvml::success) return gpus;
  for (unsigned int i = 0; i < std::min(count, 1024u); ++i) {
    accelerator a;
    a.physical_index = static_cast<int>(i);
    nvml::device_t device = nullptr;
    char uuid[nvml::uuid_buffer_size] = {};
    if (nvml.fns().device_uuid && nvml.fns().device_by_index(i, &device) == nvml::success &&
        nvml.fns().device_uuid(device, uuid, sizeof uuid) == nvml::success) {
      uuid[sizeof uuid - 1] = '\0';
      a.uuid = uuid;
    }
    gpus.push_back(std::move(a));
  }
  return gpus;
}

health_finding gpu_health::check_by_index(const std::vector<unsigned int>& devices,
                                          bool gating) {
  std::vector<expected_gpu> gpus;
  for (unsigned int index : devices) gpus.push_back({index, {}});
  return check(gpus, gating);
}

health_finding gpu_health::check(const std::vector<expected_gpu>& gpus, bool gating) {
  health_finding finding;
  finding.check = "gpu";
  finding.gating = gating;
  if (!nvml_.available()) return finding;
  drain_events();

  const auto& f = nvml_.fns();
  std::vector<std::string> failures;
  unsigned int count = 0;
  if (auto rc = f.device_count(&count); rc != nvml::success) {
    failures.push_back(fmt::format("NVML cannot count the GPUs (code {}; check: nvidia-smi -L)",
                                   rc));
    count = 0;
  }
  for (const auto& gpu : gpus) {
    unsigned int index = gpu.index;
    nvml::device_t device = nullptr;
    if (!gpu.pci_address.empty() && f.device_by_pci_bus_id) {
      if (auto rc = f.device_by_pci_bus_id(gpu.pci_address.c_str(), &device);
          rc != nvml::success) {
        failures.push_back(fmt::format("GPU {} ({}) is not visible: NVML cannot find it (code "
                                       "{}; check: nvidia-smi -L)",
                                       index, gpu.pci_address, rc));
        continue;
      }
    } else if (index >= count) {
      failures.push_back(fmt::format("GPU {} is not visible: NVML sees {} GPU{} (check: "
                                     "nvidia-smi -L)",
                                     index, count, count == 1 ? "" : "s"));
      continue;
    } else if (auto rc = f.device_by_index(index, &device); rc != nvml::success) {
      failures.push_back(fmt::format("GPU {} is not usable: NVML cannot open it (code {}; "
                                     "check: nvidia-smi -i {})",
                                     index, rc, index));
      continue;
    }
    if (auto repair = memory_repair_failure(index, device); !repair.empty()) {
      failures.push_back(std::move(repair));
    }
    if (auto it = xids_.find(device); it != xids_.end() && !it->second.empty()) {
      failures.push_back(fmt::format("GPU {} reported XID {} since the agent started (check: "
                                     "dmesg | grep -i xid)",
                                     index, xid_list(it->second)));
    }
  }
  if (!failures.empty()) {
    finding.healthy = false;
    finding.reason = join(failures, "; ");
  }
  return finding;
}

std::string gpu_health::note() const {
  if (!nvml_.available()) return "no NVIDIA driver: GPU checks skipped";
  return join(notes_, "; ");
}

}  // namespace dtrun::agent
