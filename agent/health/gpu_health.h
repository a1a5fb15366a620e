// The built-in GPU check of --node-health-check (docs/agent.md "Node
// health"): the GPUs this node's workers will use are all visible to NVML,
// none has a pending row remapping or a failed one (pending retired pages
// on GPUs before A100, which retire pages instead of remapping rows), and
// none reported an XID error since this checker registered for NVML's
// events. Aggregate ECC counters are not judged: they never reset, so a
// GPU repaired long ago would read as bad forever.
//
// No driver (no NVML): every check passes, and note() says they were
// skipped. An entry point an older driver lacks skips its check, with a
// note. A failure names what failed and the command to check it by hand.
//
// One per agent, on its event loop; every NVML call here returns at once
// (the event set is drained with a zero timeout, never waited on).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/devices/accelerators.h"
#include "agent/devices/nvml_api.h"
#include "agent/health/node_health.h"

namespace dtrun::agent {

// A GPU the node's workers will use.
struct expected_gpu {
  unsigned int index = 0;  // NVML index: accelerator::physical_index
  // "0000:3b:00.0" (accelerator::pci_address); when known, NVML is asked
  // for the GPU by it: a GPU fallen off the bus shifts the NVML indexes of
  // the ones after it, and the message must name the one that is gone.
  std::string pci_address;
};

// The GPUs of `visible` (visible_gpus() of accelerators.h).
std::vector<expected_gpu> expected_gpus(const std::vector<accelerator>& visible);

// Every GPU NVML has, in its (PCI) order, each with its UUID when NVML gives
// it: the driver's list where /proc/driver/nvidia is not there to read
// (apply_visible_devices() of accelerators.h takes it). Empty without NVML.
std::vector<accelerator> nvml_gpus(nvml_session& nvml);

class gpu_health {
 public:
  // Registers every GPU for NVML's XID events; from now on an XID counts.
  // `nvml` may be unavailable (no driver); it must outlive this checker.
  explicit gpu_health(nvml_session& nvml);
  ~gpu_health();  // frees the event set

  gpu_health(const gpu_health&) = delete;
  gpu_health& operator=(const gpu_health&) = delete;

  // Checks `gpus`, and only them (none: nothing to check, healthy). The
  // finding's check is "gpu"; `gating` as given (true with
  // --node-health-check=builtin). An XID stays counted: a GPU that
  // reported one fails every later check of this agent.
  health_finding check(const std::vector<expected_gpu>& gpus, bool gating);
  // The same by NVML index alone (NVML and the driver's /proc list both
  // number GPUs in PCI order).
  health_finding check_by_index(const std::vector<unsigned int>& devices, bool gating);

  // What was skipped, one line for the agent's debug log: "no NVIDIA
  // driver: GPU checks skipped", or the checks an old driver could not
  // do; empty when everything was checked.
  std::string note() const;

 private:
  void register_for_xids();
  // Reads every event NVML queued since the last drain, without waiting.
  void drain_events();
  // The memory-repair failure of one GPU, "" when there is none.
  std::string memory_repair_failure(unsigned int index, nvml::device_t device);
  void add_note(const std::string& line);

  nvml_session& nvml_;
  nvml::event_set_t events_ = nullptr;
  // The handles registered for events (an event names its device's).
  std::set<nvml::device_t> registered_;
  // XIDs seen since registration, per device, in order (bounded).
  std::map<nvml::device_t, std::vector<unsigned long long>> xids_;
  std::vector<std::string> notes_;
};

// XIDs an application causes on a healthy GPU (an illegal address, a
// kernel killed, the clean-up after its process was stopped: 13, 31, 43,
// 45): they do not make the node bad. Every other XID does.
bool xid_is_application_error(unsigned long long xid);

}  // namespace dtrun::agent
