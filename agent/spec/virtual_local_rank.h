// torchrun's --virtual-local-rank (torch 2.10, LocalElasticAgent.
// _set_local_rank_env): every worker gets LOCAL_RANK=0 and sees one device,
// its own, as device 0, through CUDA_VISIBLE_DEVICES. Pure, so the mapping
// is unit-tested without GPUs.
//
// torch 2.15 maps through HIP_VISIBLE_DEVICES when the agent has it (not
// empty: on ROCm it wins over CUDA_VISIBLE_DEVICES) and then sets both in
// the worker; else through CUDA_VISIBLE_DEVICES, setting only it. Neither
// touches ROCR_VISIBLE_DEVICES or Intel's ZE_AFFINITY_MASK.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

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
// entry (torch raises ValueError there); its message names `variable`,
// the list's variable.
std::string virtual_visible_device(int local_rank, const std::optional<std::string>& parent,
                                   std::string_view variable = "CUDA_VISIBLE_DEVICES");

}  // namespace dtrun::agent
