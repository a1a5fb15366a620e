// An NVML function table over a scripted state, for the GPU health,
// reclaim and identity tests: devices are handles 1..n, and every call
// reads fake_nvml_functions::state() as it is at that moment, so a test
// changes the GPUs between two calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "agent/devices/nvml_api.h"

namespace fake_nvml_functions {

namespace nvml = dtrun::agent::nvml;

struct gpu {
  unsigned long long memory_used = 500ull << 20;
  std::vector<nvml::process_info_t> processes;
  unsigned int architecture = 9;  // Hopper
  unsigned int remap_pending = 0;
  unsigned int remap_failure = 0;
  nvml::return_t remap_rc = nvml::success;
  int pages_pending = 0;  // nvmlEnableState_t
  std::string uuid;
  std::string pci_address;
};

struct scripted {
  std::vector<gpu> gpus;
  std::deque<nvml::event_data_t> events;  // handed out by the wait, once each
  int registered = 0;                     // devices registered for events
  int waits_with_timeout = 0;             // waits that asked to block
  bool event_set_freed = false;
};

inline scripted& state() {
  static scripted s;
  return s;
}

inline nvml::device_t handle(unsigned int index) {
  return reinterpret_cast<nvml::device_t>(static_cast<std::uintptr_t>(index + 1));
}
inline gpu* gpu_of(nvml::device_t d) {
  auto i = reinterpret_cast<std::uintptr_t>(d) - 1;
  return i < state().gpus.size() ? &state().gpus[i] : nullptr;
}

inline nvml::return_t init() { return nvml::success; }
inline nvml::return_t shutdown() { return nvml::success; }
inline nvml::return_t count(unsigned int* n) {
  *n = static_cast<unsigned int>(state().gpus.size());
  return nvml::success;
}
inline nvml::return_t by_index(unsigned int i, nvml::device_t* d) {
  if (i >= state().gpus.size()) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = handle(i);
  return nvml::success;
}
inline nvml::return_t by_pci_bus_id(const char* address, nvml::device_t* d) {
  for (unsigned int i = 0; i < state().gpus.size(); ++i) {
    if (state().gpus[i].pci_address == address) {
      *d = handle(i);
      return nvml::success;
    }
  }
  return nvml::error_not_found;
}
inline nvml::return_t processes(nvml::device_t d, unsigned int* n, nvml::process_info_t* out) {
  const auto& p = gpu_of(d)->processes;
  if (!out || *n < p.size()) {
    *n = static_cast<unsigned int>(p.size());
    return p.empty() ? nvml::success : nvml::error_insufficient_size;
  }
  *n = static_cast<unsigned int>(p.size());
  std::copy(p.begin(), p.end(), out);
  return nvml::success;
}
inline nvml::return_t memory(nvml::device_t d, nvml::memory_t* m) {
  auto used = gpu_of(d)->memory_used;
  *m = {80ull << 30, (80ull << 30) - used, used};
  return nvml::success;
}
inline nvml::return_t uuid(nvml::device_t d, char* out, unsigned int length) {
  const auto& u = gpu_of(d)->uuid;
  if (u.size() + 1 > length) return nvml::error_insufficient_size;
  std::memcpy(out, u.c_str(), u.size() + 1);
  return nvml::success;
}
inline nvml::return_t architecture(nvml::device_t d, unsigned int* arch) {
  *arch = gpu_of(d)->architecture;
  return nvml::success;
}
inline nvml::return_t remapped_rows(nvml::device_t d, unsigned int* corrected,
                                    unsigned int* uncorrected, unsigned int* pending,
                                    unsigned int* failure) {
  const auto* g = gpu_of(d);
  if (g->remap_rc != nvml::success) return g->remap_rc;
  *corrected = 0;
  *uncorrected = g->remap_failure ? 3 : 0;
  *pending = g->remap_pending;
  *failure = g->remap_failure;
  return nvml::success;
}
inline nvml::return_t pages_pending(nvml::device_t d, int* pending) {
  *pending = gpu_of(d)->pages_pending;
  return nvml::success;
}
inline nvml::return_t event_set_create(nvml::event_set_t* set) {
  *set = reinterpret_cast<nvml::event_set_t>(static_cast<std::uintptr_t>(0x5e7));
  return nvml::success;
}
inline nvml::return_t register_events(nvml::device_t, unsigned long long types,
                                      nvml::event_set_t) {
  if (!(types & nvml::event_type_xid_critical_error)) return 2;
  ++state().registered;
  return nvml::success;
}
inline nvml::return_t event_wait(nvml::event_set_t, nvml::event_data_t* data,
                                 unsigned int timeout_ms) {
  if (timeout_ms != 0) ++state().waits_with_timeout;
  if (state().events.empty()) return nvml::error_timeout;
  *data = state().events.front();
  state().events.pop_front();
  return nvml::success;
}
inline nvml::return_t event_set_free(nvml::event_set_t) {
  state().event_set_freed = true;
  return nvml::success;
}

// `gpus` devices, healthy and idle; every entry point set.
inline nvml::functions functions(unsigned int gpus) {
  state() = scripted{};
  for (unsigned int i = 0; i < gpus; ++i) {
    gpu g;
    g.uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i);
    g.pci_address = "0000:0" + std::to_string(i + 1) + ":00.0";
    state().gpus.push_back(g);
  }
  nvml::functions f;
  f.init = init;
  f.shutdown = shutdown;
  f.device_count = count;
  f.device_by_index = by_index;
  f.device_by_pci_bus_id = by_pci_bus_id;
  f.compute_processes = processes;
  f.memory_info = memory;
  f.device_uuid = uuid;
  f.architecture = architecture;
  f.remapped_rows = remapped_rows;
  f.retired_pages_pending = pages_pending;
  f.event_set_create = event_set_create;
  f.register_events = register_events;
  f.event_set_wait = event_wait;
  f.event_set_free = event_set_free;
  return f;
}

inline nvml::event_data_t xid_event(unsigned int device, unsigned long long xid) {
  return {handle(device), nvml::event_type_xid_critical_error, xid, 0xffffffffu, 0xffffffffu};
}

}  // namespace fake_nvml_functions
