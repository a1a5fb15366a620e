// NVIDIA's NVML C ABI, declared here (no NVIDIA headers at build time),
// and its loading: libnvidia-ml.so.1 is opened at run time with dlopen, so
// a machine without the driver simply has no GPU figures and no GPU
// checks. The declarations follow nvml.h of CUDA 11+ drivers; an entry
// point an older driver lacks stays null, and whoever needs it skips what
// it was for.
//
// gpu_stats (`dtrun status`, metrics), gpu_health (--node-health-check),
// gpu_reclaim and machine_identity share these declarations and, in the
// agent, its one nvml_session (agent_env.h: opened once per agent).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dtrun::agent {

// NVML's types, declared here with its ABI.
namespace nvml {
using return_t = int;  // nvmlReturn_t
inline constexpr return_t success = 0;
inline constexpr return_t error_not_supported = 3;
inline constexpr return_t error_not_found = 6;
inline constexpr return_t error_insufficient_size = 7;
inline constexpr return_t error_timeout = 10;
struct device_st;
using device_t = device_st*;  // nvmlDevice_t
struct event_set_st;
using event_set_t = event_set_st*;  // nvmlEventSet_t
// nvmlProcessInfo_t as the _v2 and _v3 entry points fill it (v2 layout).
struct process_info_t {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // NVML_VALUE_NOT_AVAILABLE: ~0ull
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
// nvmlProcessUtilizationSample_t
struct process_utilization_sample_t {
  unsigned int pid;
  unsigned long long time_stamp;  // microseconds
  unsigned int sm_util;           // percent
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};
struct utilization_t {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct memory_t {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// nvmlEventData_t as nvmlEventSetWait_v2 fills it (the MIG instance ids
// came with _v2; an older layout is a prefix of this one).
struct event_data_t {
  device_t device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID for an XID event; 999: unknown
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
inline constexpr unsigned long long event_type_xid_critical_error = 0x8;
// nvmlEnableState_t
inline constexpr int feature_enabled = 1;
// nvmlDeviceArchitecture_t values: row remapping came with Ampere (A100);
// older GPUs retire pages instead.
inline constexpr unsigned int architecture_ampere = 7;
inline constexpr unsigned int architecture_unknown = 0xffffffff;
// NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned int uuid_buffer_size = 96;
// NVML_VALUE_NOT_AVAILABLE, as an unsigned long long field holds it
inline constexpr unsigned long long value_not_available = ~0ull;
static_assert(sizeof(process_info_t) == 24);
static_assert(sizeof(process_utilization_sample_t) == 32);
static_assert(sizeof(event_data_t) == 32);

// The entry points used; a test fills them with fakes. Every one past
// compute_processes is optional.
struct functions {
  return_t (*init)() = nullptr;      // nvmlInit_v2
  return_t (*shutdown)() = nullptr;  // nvmlShutdown
  // nvmlDeviceGetCount_v2
  return_t (*device_count)(unsigned int*) = nullptr;
  // nvmlDeviceGetHandleByIndex_v2
  return_t (*device_by_index)(unsigned int, device_t*) = nullptr;
  // nvmlDeviceGetHandleByPciBusId_v2("0000:3b:00.0", &device); optional
  return_t (*device_by_pci_bus_id)(const char*, device_t*) = nullptr;
  // nvmlDeviceGetComputeRunningProcesses_v3 (or _v2: the same layout)
  return_t (*compute_processes)(device_t, unsigned int*, process_info_t*) = nullptr;
  // nvmlDeviceGetProcessUtilization; optional (not on every GPU)
  return_t (*process_utilization)(device_t, process_utilization_sample_t*, unsigned int*,
                                  unsigned long long) = nullptr;
  // nvmlDeviceGetUtilizationRates
  return_t (*utilization_rates)(device_t, utilization_t*) = nullptr;
  return_t (*memory_info)(device_t, memory_t*) = nullptr;  // nvmlDeviceGetMemoryInfo
  // nvmlDeviceGetUUID: "GPU-<uuid>", NUL-terminated
  return_t (*device_uuid)(device_t, char*, unsigned int) = nullptr;
  // nvmlDeviceGetArchitecture (R470+)
  return_t (*architecture)(device_t, unsigned int*) = nullptr;
  // nvmlDeviceGetRemappedRows(device, corrected, uncorrected, pending, failure)
  return_t (*remapped_rows)(device_t, unsigned int*, unsigned int*, unsigned int*,
                            unsigned int*) = nullptr;
  // nvmlDeviceGetRetiredPagesPendingStatus(device, nvmlEnableState_t*)
  return_t (*retired_pages_pending)(device_t, int*) = nullptr;
  return_t (*event_set_create)(event_set_t*) = nullptr;  // nvmlEventSetCreate
  // nvmlDeviceRegisterEvents(device, event types, set)
  return_t (*register_events)(device_t, unsigned long long, event_set_t) = nullptr;
  // nvmlEventSetWait_v2(set, data, timeout ms); called with 0 only: a
  // drain that never blocks the loop
  return_t (*event_set_wait)(event_set_t, event_data_t*, unsigned int) = nullptr;
  return_t (*event_set_free)(event_set_t) = nullptr;  // nvmlEventSetFree
};

// Every entry point loaded: the member of `functions` and NVML's symbol,
// listed once, so that load_functions and the check against NVIDIA's
// nvml.h (tests/nvml_header/) read the same names.
#define DTRUN_NVML_ENTRY_POINTS(X)                                     \
  X(init, nvmlInit_v2)                                                 \
  X(shutdown, nvmlShutdown)                                            \
  X(device_count, nvmlDeviceGetCount_v2)                               \
  X(device_by_index, nvmlDeviceGetHandleByIndex_v2)                    \
  X(device_by_pci_bus_id, nvmlDeviceGetHandleByPciBusId_v2)            \
  X(compute_processes, nvmlDeviceGetComputeRunningProcesses_v3)        \
  X(process_utilization, nvmlDeviceGetProcessUtilization)              \
  X(utilization_rates, nvmlDeviceGetUtilizationRates)                  \
  X(memory_info, nvmlDeviceGetMemoryInfo)                              \
  X(device_uuid, nvmlDeviceGetUUID)                                    \
  X(architecture, nvmlDeviceGetArchitecture)                           \
  X(remapped_rows, nvmlDeviceGetRemappedRows)                          \
  X(retired_pages_pending, nvmlDeviceGetRetiredPagesPendingStatus)     \
  X(event_set_create, nvmlEventSetCreate)                              \
  X(register_events, nvmlDeviceRegisterEvents)                         \
  X(event_set_wait, nvmlEventSetWait_v2)                               \
  X(event_set_free, nvmlEventSetFree)
// Loaded when the driver lacks the entry point above (older drivers): the
// same layout. nvmlEventSetWait has none: the unversioned wait of old
// drivers filled a shorter event data; then XIDs are not watched.
#define DTRUN_NVML_FALLBACKS(X) X(compute_processes, nvmlDeviceGetComputeRunningProcesses_v2)

// Fills `out` with every entry point `library` (a dlopen handle of
// libnvidia-ml.so.1) has; the ones it lacks stay null.
void load_functions(void* library, functions& out);

// The compute processes on `device` (`dtrun status`'s GPU memory per
// worker, the reclaim's holders); empty when NVML fails or lacks the call.
std::vector<process_info_t> compute_processes_on(const functions& f, device_t device);
}  // namespace nvml

// NVML opened and initialised, for as long as the session lives. Not
// thread-safe; on the agent's event loop.
class nvml_session {
 public:
  // dlopens libnvidia-ml.so.1 and calls nvmlInit. When the library is
  // absent or init fails, available() is false and why_unavailable() says
  // why in one line.
  nvml_session();
  // With given entry points (tests); calls fns.init.
  explicit nvml_session(nvml::functions fns);
  ~nvml_session();  // nvmlShutdown and dlclose

  nvml_session(const nvml_session&) = delete;
  nvml_session& operator=(const nvml_session&) = delete;

  bool available() const { return available_; }
  const std::string& why_unavailable() const { return why_; }
  // The entry points; init, shutdown, device_count, device_by_index are
  // set when available().
  const nvml::functions& fns() const { return fns_; }

 private:
  void start();

  nvml::functions fns_;
  void* library_ = nullptr;
  bool available_ = false;
  std::string why_;
};

}  // namespace dtrun::agent
