// The accelerators a worker's torch will see, found without loading any
// GPU runtime: the devices the drivers list under /sys and /proc, narrowed
// and ordered by the visibility variables the runtimes read, with torch's
// own parsing rules (torch/cuda/__init__.py _parse_visible_devices).
//
// Everything is read under a root folder ("/" normally) so that tests can
// point discovery at a fake tree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

enum class accelerator_kind { cuda, rocm, xpu };

struct accelerator {
  accelerator_kind kind = accelerator_kind::cuda;
  // Position among all of the driver's devices (before any visibility
  // variable), which is what an ordinal in CUDA_VISIBLE_DEVICES names.
  int physical_index = 0;
  // "0000:3b:00.0" (lower case); empty when unknown.
  std::string pci_address;
  // NVIDIA "GPU-<uuid>", AMD the hexadecimal unique id; empty if unknown.
  std::string uuid;
  // How the visibility variable named this device: the user's entry
  // ("3", "GPU-9e8d") or, with no variable set, the physical index. A
  // worker given only this device gets it as CUDA_VISIBLE_DEVICES etc.
  std::string selector;
};

// The visible devices of each kind, each in the order the runtime numbers
// them (device i of torch.cuda is cuda[i]).
struct accelerator_inventory {
  std::vector<accelerator> cuda;  // NVIDIA, /proc/driver/nvidia (PCI order)
  std::vector<accelerator> rocm;  // AMD, /sys/class/kfd topology order
  std::vector<accelerator> xpu;   // Intel i915/xe render nodes (PCI order)

  // The devices torch.cuda counts: NVIDIA ones, else AMD ones (a ROCm
  // build of torch answers to torch.cuda).
  const std::vector<accelerator>& gpus() const { return cuda.empty() ? rocm : cuda; }
};

// Reads the drivers' device lists under `root` and applies `env`'s
// CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES and
// ZE_AFFINITY_MASK. Never throws: what cannot be read counts as absent.
accelerator_inventory discover_accelerators(const std::string& root, const env_map& env);

// The visible GPUs in CUDA's order (torch.cuda device i is element i), for
// callers that give each worker its own device (--virtual-local-rank).
std::vector<accelerator> visible_gpus(const std::string& root, const env_map& env);

// torch's rule for one visibility variable over `devices` (the driver's
// list, physical order): nullopt keeps them all; ordinals ("0,2", parsed
// like strtoul: "1gpu" is 1) or UUID prefixes ("GPU-9e8d,GPU-12ab"); the
// list stops at the first invalid, negative or out-of-range entry, and a
// repeated device makes it empty. With `strip_gpu_prefix` (AMD), "GPU-" is
// dropped before UUIDs are matched.
std::vector<accelerator> apply_visible_devices(const std::optional<std::string>& value,
                                               const std::vector<accelerator>& devices,
                                               bool strip_gpu_prefix = false);

// The NUMA node of a PCI device, as torch's NUMA binding reads it
// (/sys/bus/pci/devices/<address>/numa_node, where -1 means node 0);
// nullopt when the file cannot be read.
std::optional<int> pci_numa_node(const std::string& root, const std::string& pci_address);

// The CPUs this process may run on (sched_getaffinity: taskset, a cgroup
// cpuset), as torch 2.12's torch._utils.cpu_count() that torchrun's
// --nproc-per-node cpu/auto counts; the online CPUs if that cannot be
// read. At least 1.
int usable_cpu_count();

// "cuda", "rocm", "xpu".
const char* to_string(accelerator_kind kind);

}  // namespace dtrun::agent
