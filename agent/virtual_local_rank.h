// torchrun's --virtual-local-rank (torch 2.10, LocalElasticAgent.
// _set_local_rank_env): every worker gets LOCAL_RANK=0 and sees one device,
// its own, as device 0, through CUDA_VISIBLE_DEVICES. Pure, so the mapping
// is unit-tested without GPUs.
//
// torch sets CUDA_VISIBLE_DEVICES only (ROCm's HIP honours it too); it does
// not touch HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or Intel's
// ZE_AFFINITY_MASK, and neither does dtrun.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace dtrun::agent {

// The worker's local rank has no device in the parent's list; what() is
// one line saying what to do.
class no_visible_device : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CUDA_VISIBLE_DEVICES for the worker with `local_rank`, given the agent's
// own CUDA_VISIBLE_DEVICES (`parent`, nullopt when unset): unset, the
// local rank itself ("3"); set, its local_rank-th comma-separated entry
// with blanks trimmed (parent "4,5,6" -> rank 1 gets "5"; UUIDs and MIG
// names pass through). Throws no_visible_device when the list has no such
// entry (torch raises ValueError there).
std::string virtual_visible_device(int local_rank, const std::optional<std::string>& parent);

}  // namespace dtrun::agent
