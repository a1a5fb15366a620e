// Which machine this node is, for keeping a bad node out (issue 34): the
// machine, not its host name, so that a Kubernetes pod replaced under the
// same name on another machine is not kept out, and a machine that comes
// back under another name is still known.
//
// The key is "<machine-id's first 12 hex>" and, when NVML lists GPUs,
// ":<12 hex of FNV-1a 64 over the sorted GPU UUIDs joined by ','>", e.g.
// "4f1c0e2a9b7d:83a1c4e09f22". Sorted: the same GPUs in another order (a
// CUDA_VISIBLE_DEVICES, a driver's enumeration) give the same key. The
// GPU part tells apart containers whose image baked in one machine-id.
// Without /etc/machine-id (nor /var/lib/dbus/machine-id) the machine part
// is "host-" and the host name: the best there is, and said in the label.
#pragma once

#include <string>
#include <vector>

#include "agent/devices/nvml_api.h"

namespace dtrun::agent {

struct machine_identity {
  std::string key;    // short and stable; see above
  std::string label;  // for messages: "node7 (machine 4f1c0e2a9b7d)"
  std::string machine_id;             // trimmed; empty when unreadable
  std::vector<std::string> gpu_uuids;  // sorted
};

// Builds the identity from its parts (tests give them directly).
machine_identity make_machine_identity(const std::string& machine_id,
                                       std::vector<std::string> gpu_uuids,
                                       const std::string& host_name);

// /etc/machine-id (or the dbus copy) trimmed; "" when neither is readable.
// `paths` replaces the two for tests.
std::string read_machine_id(const std::vector<std::string>& paths = {
                                "/etc/machine-id", "/var/lib/dbus/machine-id"});

// Every GPU's UUID as NVML gives it ("GPU-..."); empty without NVML or
// nvmlDeviceGetUUID.
std::vector<std::string> nvml_gpu_uuids(nvml_session& nvml);

// This machine: read_machine_id(), nvml_gpu_uuids(), gethostname.
machine_identity this_machine_identity(nvml_session& nvml);

}  // namespace dtrun::agent
