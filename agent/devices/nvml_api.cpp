#include "agent/devices/nvml_api.h"

#include <dlfcn.h>

#include <algorithm>

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
#define DTRUN_NVML_LOAD(member, symbol) load(library, #symbol, out.member);
  DTRUN_NVML_ENTRY_POINTS(DTRUN_NVML_LOAD)
#undef DTRUN_NVML_LOAD
#define DTRUN_NVML_LOAD_FALLBACK(member, symbol) \
  if (!out.member) load(library, #symbol, out.member);
  DTRUN_NVML_FALLBACKS(DTRUN_NVML_LOAD_FALLBACK)
#undef DTRUN_NVML_LOAD_FALLBACK
}

}  // namespace nvml

// Size first, then fill; processes may start in between, so retry with a
// margin while NVML says the buffer is short.
std::vector<nvml::process_info_t> nvml::compute_processes_on(const nvml::functions& f,
                                                            nvml::device_t device) {
  // More processes on one GPU than anyone runs; bounds what we allocate.
  constexpr unsigned int max_processes = 4096;
  std::vector<process_info_t> infos;
  if (!f.compute_processes) return infos;
  unsigned int n = 0;
  auto rc = f.compute_processes(device, &n, nullptr);
  for (int attempt = 0; attempt < 3 && rc == error_insufficient_size; ++attempt) {
    n = std::min(n + 8, max_processes);
    infos.resize(n);
    rc = f.compute_processes(device, &n, infos.data());
  }
  if (rc != success) return {};
  infos.resize(std::min<std::size_t>(n, infos.size()));
  return infos;
}

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
