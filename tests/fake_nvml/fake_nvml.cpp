// A fake libnvidia-ml.so.1 for the tests: an agent started with
// LD_LIBRARY_PATH=<this library's folder> dlopens it instead of NVIDIA's,
// and sees GPUs described by environment variables (read at nvmlInit) and
// by a state file (re-read at every call, so a test changes the GPUs while
// the agent runs):
//
//   FAKE_NVML_GPUS=2                 the number of GPUs (default 1, max 64);
//                                    GPU i is at PCI address 0000:<i+1>:00.0
//   FAKE_NVML_ARCH=7                 nvmlDeviceGetArchitecture (default 9,
//                                    Hopper; below 7 is before A100)
//   FAKE_NVML_PENDING_REMAP=1[,2]    GPUs with a row remapping pending
//   FAKE_NVML_REMAP_FAILURE=1        GPUs whose row remapping failed
//   FAKE_NVML_RETIRED_PENDING=1      GPUs with retired pages pending
//   FAKE_NVML_XID=1:79[,0:48]        XIDs (device:xid), each delivered once
//                                    by nvmlEventSetWait_v2 to an event set
//                                    that device was registered with
//   FAKE_NVML_UUID_PREFIX=GPU-abc-   UUIDs are the prefix and the index in
//                                    12 digits (default GPU-fa4e0000-0000-
//                                    0000-0000-)
//   FAKE_NVML_INIT_FAIL=9            nvmlInit_v2 returns this code
//   FAKE_NVML_LOG=/path              one line appended per event-set call
//                                    ("wait <timeout ms>", "register <i>")
//   FAKE_NVML_STATE=/path            lines, re-read at each call:
//                                      memory <dev> <bytes used>
//                                      process <dev> <pid> <bytes>
//                                      remap_pending <dev>
//                                      xid <dev> <xid>  (each once, in order)
//                                    a GPU without a memory line uses the
//                                    sum of its processes' bytes.
//
// The declarations are transcribed from nvml.h (fake_nvml_types.h),
// independently of agent/devices/nvml_api.h, so that a layout mistake there is not
// repeated here. Where NVIDIA's nvml.h exists (tests/nvml_header/), the
// transcription is compared with it, and this file is compiled a second
// time with FAKE_NVML_WITH_NVML_H, against the header instead: every
// function defined below must then match its prototype there. Only the C
// library is used (the library must load into any test program, sanitized
// or not). Not thread-safe: dtrun calls NVML from its event loop only.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef FAKE_NVML_WITH_NVML_H
#define NVML_NO_UNVERSIONED_FUNC_DEFS  // nvmlInit and the _v2 fallbacks declared
#include <nvml.h>
#else
#include "fake_nvml_types.h"
#endif

namespace {

constexpr int max_gpus = 64;
constexpr int max_processes = 256;
constexpr int max_xids = 64;
constexpr unsigned long long total_memory = 80ull << 30;

struct nvmlDevice_st_fake {
  int index;
};

struct process {
  int device;
  unsigned int pid;
  unsigned long long bytes;
};

struct xid {
  int device;
  unsigned long long code;
};

// What nvmlInit read from the environment.
struct config {
  int initialised = 0;
  int configured = 0;
  int gpus = 1;
  unsigned int architecture = 9;
  int pending_remap[max_gpus] = {};
  int remap_failure[max_gpus] = {};
  int retired_pending[max_gpus] = {};
  xid env_xids[max_xids] = {};
  int env_xid_count = 0;
  int env_xids_delivered = 0;
  int state_xids_delivered = 0;
  int registered[max_gpus] = {};
  char uuid_prefix[64] = "GPU-fa4e0000-0000-0000-0000-";
};

// What the state file says now.
struct state {
  long long memory[max_gpus];
  int remap_pending[max_gpus];
  process processes[max_processes];
  int process_count;
  xid xids[max_xids];
  int xid_count;
};

config cfg;
nvmlDevice_st_fake devices[max_gpus];
int event_set_token;

nvmlDevice_t handle(int index) { return reinterpret_cast<nvmlDevice_t>(&devices[index]); }

int index_of(nvmlDevice_t device) {
  auto* d = reinterpret_cast<nvmlDevice_st_fake*>(device);
  if (d < devices || d >= devices + cfg.gpus) return -1;
  return d->index;
}

// "1,3" -> flags[1] = flags[3] = 1
void read_device_list(const char* name, int* flags) {
  const char* value = getenv(name);
  while (value && *value) {
    char* end = nullptr;
    long i = strtol(value, &end, 10);
    if (end == value) break;
    if (i >= 0 && i < max_gpus) flags[i] = 1;
    value = *end == ',' ? end + 1 : end;
    if (end == value && *end) break;
  }
}

void read_env_xids() {
  const char* value = getenv("FAKE_NVML_XID");
  while (value && *value && cfg.env_xid_count < max_xids) {
    char* end = nullptr;
    long device = strtol(value, &end, 10);
    if (*end != ':') break;
    unsigned long long code = strtoull(end + 1, &end, 10);
    cfg.env_xids[cfg.env_xid_count++] = {static_cast<int>(device), code};
    if (*end != ',') break;
    value = end + 1;
  }
}

state read_state() {
  state s;
  memset(&s, 0, sizeof s);
  for (auto& m : s.memory) m = -1;
  const char* path = getenv("FAKE_NVML_STATE");
  FILE* f = path ? fopen(path, "r") : nullptr;
  if (!f) return s;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char word[32];
    long long a = 0, b = 0, c = 0;
    int n = sscanf(line, "%31s %lld %lld %lld", word, &a, &b, &c);
    if (n < 2 || a < 0 || a >= max_gpus) continue;
    int dev = static_cast<int>(a);
    if (!strcmp(word, "memory") && n >= 3) {
      s.memory[dev] = b;
    } else if (!strcmp(word, "process") && n >= 4 && s.process_count < max_processes) {
      s.processes[s.process_count++] = {dev, static_cast<unsigned int>(b),
                                        static_cast<unsigned long long>(c)};
    } else if (!strcmp(word, "remap_pending")) {
      s.remap_pending[dev] = 1;
    } else if (!strcmp(word, "xid") && n >= 3 && s.xid_count < max_xids) {
      s.xids[s.xid_count++] = {dev, static_cast<unsigned long long>(b)};
    }
  }
  fclose(f);
  return s;
}

void log_line(const char* format, unsigned long long value) {
  const char* path = getenv("FAKE_NVML_LOG");
  FILE* f = path ? fopen(path, "a") : nullptr;
  if (!f) return;
  fprintf(f, format, value);
  fputc('\n', f);
  fclose(f);
}

bool valid(nvmlDevice_t device) { return cfg.initialised && index_of(device) >= 0; }

}  // namespace

extern "C" {

#define FAKE_NVML_EXPORT __attribute__((visibility("default")))

FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  if (const char* fail = getenv("FAKE_NVML_INIT_FAIL")) {
    return static_cast<nvmlReturn_t>(atoi(fail));
  }
  ++cfg.initialised;  // reference-counted, as NVML
  // The environment is read once per process: XIDs stay delivered once
  // across sessions (gpu_stats and the health parts each hold one).
  if (cfg.configured) return NVML_SUCCESS;
  cfg.configured = 1;
  if (const char* gpus = getenv("FAKE_NVML_GPUS")) cfg.gpus = atoi(gpus);
  if (cfg.gpus < 0) cfg.gpus = 0;
  if (cfg.gpus > max_gpus) cfg.gpus = max_gpus;
  if (const char* arch = getenv("FAKE_NVML_ARCH")) {
    cfg.architecture = static_cast<unsigned int>(atoi(arch));
  }
  if (const char* prefix = getenv("FAKE_NVML_UUID_PREFIX")) {
    snprintf(cfg.uuid_prefix, sizeof cfg.uuid_prefix, "%s", prefix);
  }
  read_device_list("FAKE_NVML_PENDING_REMAP", cfg.pending_remap);
  read_device_list("FAKE_NVML_REMAP_FAILURE", cfg.remap_failure);
  read_device_list("FAKE_NVML_RETIRED_PENDING", cfg.retired_pending);
  read_env_xids();
  for (int i = 0; i < max_gpus; ++i) devices[i].index = i;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  --cfg.initialised;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  return result == NVML_SUCCESS ? "Success" : "Fake NVML error";
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(cfg.gpus);
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                           nvmlDevice_t* device) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= static_cast<unsigned int>(cfg.gpus)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = handle(static_cast<int>(index));
  return NVML_SUCCESS;
}

// GPU i is at PCI address 0000:<i+1, two hex digits>:00.0.
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                              nvmlDevice_t* device) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < cfg.gpus; ++i) {
    char address[32];
    snprintf(address, sizeof address, "0000:%02x:00.0", i + 1);
    if (!strcasecmp(address, pciBusId)) {
      *device = handle(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                     unsigned int* count,
                                                                     nvmlProcessInfo_t* infos) {
  if (!valid(device) || !count) return NVML_ERROR_INVALID_ARGUMENT;
  int dev = index_of(device);
  state s = read_state();
  unsigned int n = 0;
  for (int i = 0; i < s.process_count; ++i) n += s.processes[i].device == dev;
  if (!infos || *count < n) {
    *count = n;
    return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  unsigned int out = 0;
  for (int i = 0; i < s.process_count; ++i) {
    if (s.processes[i].device != dev) continue;
    infos[out++] = {s.processes[i].pid, s.processes[i].bytes, 0xffffffffu, 0xffffffffu};
  }
  *count = n;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                     unsigned int* count,
                                                                     nvmlProcessInfo_v2_t* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!valid(device) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
  int dev = index_of(device);
  state s = read_state();
  unsigned long long used = 0;
  if (s.memory[dev] >= 0) {
    used = static_cast<unsigned long long>(s.memory[dev]);
  } else {
    for (int i = 0; i < s.process_count; ++i) {
      if (s.processes[i].device == dev) used += s.processes[i].bytes;
    }
  }
  if (used > total_memory) used = total_memory;
  *memory = {total_memory, total_memory - used, used};
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                           nvmlUtilization_t* utilization) {
  if (!valid(device) || !utilization) return NVML_ERROR_INVALID_ARGUMENT;
  *utilization = {0, 0};
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                               unsigned int length) {
  if (!valid(device) || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
  int n = snprintf(uuid, length, "%s%012d", cfg.uuid_prefix, index_of(device));
  return n < 0 || static_cast<unsigned int>(n) >= length ? NVML_ERROR_INSUFFICIENT_SIZE
                                                         : NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                       nvmlDeviceArchitecture_t* arch) {
  if (!valid(device) || !arch) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = cfg.architecture;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device,
                                                       unsigned int* corrRows,
                                                       unsigned int* uncRows,
                                                       unsigned int* isPending,
                                                       unsigned int* failureOccurred) {
  if (!valid(device) || !corrRows || !uncRows || !isPending || !failureOccurred) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (cfg.architecture < 7) return NVML_ERROR_NOT_SUPPORTED;  // no row remapping before A100
  int dev = index_of(device);
  state s = read_state();
  *corrRows = 0;
  *uncRows = cfg.remap_failure[dev] ? 1 : 0;
  *isPending = cfg.pending_remap[dev] || s.remap_pending[dev] ? 1 : 0;
  *failureOccurred = cfg.remap_failure[dev] ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                    nvmlEnableState_t* pending) {
  if (!valid(device) || !pending) return NVML_ERROR_INVALID_ARGUMENT;
  *pending = cfg.retired_pending[index_of(device)] ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  *set = reinterpret_cast<nvmlEventSet_t>(&event_set_token);
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                      unsigned long long eventTypes,
                                                      nvmlEventSet_t set) {
  if (!valid(device) || set != reinterpret_cast<nvmlEventSet_t>(&event_set_token)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!(eventTypes & nvmlEventTypeXidCriticalError)) return NVML_ERROR_NOT_SUPPORTED;
  cfg.registered[index_of(device)] = 1;
  log_line("register %llu", static_cast<unsigned long long>(index_of(device)));
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                 unsigned int timeoutms) {
  if (!cfg.initialised) return NVML_ERROR_UNINITIALIZED;
  if (set != reinterpret_cast<nvmlEventSet_t>(&event_set_token) || !data) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  log_line("wait %llu", timeoutms);
  // Never sleeps, whatever the timeout: a test sees a blocking wait in
  // the log instead of hanging on it.
  while (cfg.env_xids_delivered < cfg.env_xid_count) {
    xid x = cfg.env_xids[cfg.env_xids_delivered++];
    if (x.device < 0 || x.device >= cfg.gpus || !cfg.registered[x.device]) continue;
    *data = {handle(x.device), nvmlEventTypeXidCriticalError, x.code, 0xffffffffu, 0xffffffffu};
    return NVML_SUCCESS;
  }
  state s = read_state();
  while (cfg.state_xids_delivered < s.xid_count) {
    xid x = s.xids[cfg.state_xids_delivered++];
    if (x.device >= cfg.gpus || !cfg.registered[x.device]) continue;
    *data = {handle(x.device), nvmlEventTypeXidCriticalError, x.code, 0xffffffffu, 0xffffffffu};
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set != reinterpret_cast<nvmlEventSet_t>(&event_set_token)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (auto& r : cfg.registered) r = 0;
  return NVML_SUCCESS;
}

}  // extern "C"
