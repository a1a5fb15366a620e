#include "agent/nvml_api.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace dtrun::agent {

namespace nvml {

namespace {

template <class F>
void load(void* library, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(library, name));
}

}  // namespace

void load_functions(void* library, functions& out) {
  load(library, "nvmlInit_v2", out.init);
  load(library, "nvmlShutdown", out.shutdown);
  load(library, "nvmlDeviceGetCount_v2", out.device_count);
  load(library, "nvmlDeviceGetHandleByIndex_v2", out.device_by_index);
  load(library, "nvmlDeviceGetHandleByPciBusId_v2", out.device_by_pci_bus_id);
  load(library, "nvmlDeviceGetComputeRunningProcesses_v3", out.compute_processes);
  if (!out.compute_processes) {
    load(library, "nvmlDeviceGetComputeRunningProcesses_v2", out.compute_processes);
  }
  load(library, "nvmlDeviceGetProcessUtilization", out.process_utilization);
  load(library, "nvmlDeviceGetUtilizationRates", out.utilization_rates);
  load(library, "nvmlDeviceGetMemoryInfo", out.memory_info);
  load(library, "nvmlDeviceGetUUID", out.device_uuid);
  load(library, "nvmlDeviceGetArchitecture", out.architecture);
  load(library, "nvmlDeviceGetRemappedRows", out.remapped_rows);
  load(library, "nvmlDeviceGetRetiredPagesPendingStatus", out.retired_pages_pending);
  load(library, "nvmlEventSetCreate", out.event_set_create);
  load(library, "nvmlDeviceRegisterEvents", out.register_events);
  // Only _v2: its event data layout is the one declared (the unversioned
  // wait of old drivers filled a shorter one; then XIDs are not watched).
  load(library, "nvmlEventSetWait_v2", out.event_set_wait);
  load(library, "nvmlEventSetFree", out.event_set_free);
}

}  // namespace nvml

nvml_session::nvml_session() {
  // RTLD_LOCAL: its symbols stay out of ours. glibc stays dynamic in the
  // portable build (docs/building.md), so dlopen works there too.
  library_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char* why = ::dlerror();
    why_ = fmt::format("NVML not loaded ({})", why ? why : "unknown");
    return;
  }
  nvml::load_functions(library_, fns_);
  start();
}

nvml_session::nvml_session(nvml::functions fns) : fns_(fns) { start(); }

void nvml_session::start() {
  if (!fns_.init || !fns_.shutdown || !fns_.device_count || !fns_.device_by_index) {
    why_ = "NVML lacks an entry point dtrun needs (driver older than CUDA 11?)";
    return;
  }
  if (auto rc = fns_.init(); rc != nvml::success) {
    why_ = fmt::format("nvmlInit failed with code {}", rc);
    return;
  }
  available_ = true;
}

nvml_session::~nvml_session() {
  if (available_) fns_.shutdown();
  if (library_) ::dlclose(library_);
}

}  // namespace dtrun::agent
