// GPU memory reclaimed before a new round on this node (--gpu-reclaim-
// timeout; docs/agent.md, "Node health"): after the workers were stopped,
// wait, bounded, until no process of the round holds the node's GPUs and
// their memory is back near its level before the first round. A GPU that
// is not given back would fail every later round with "CUDA out of memory"
// or "device busy": the node leaves instead (elastic_agent_impl.h says
// which file holds what).
#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/health/gpu_health.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::agent {

// Before the first round: NVML (the GPU checks, the machine's key for
// quarantine, the reclaim; a machine without the driver only fails a
// dlopen), and what the node's GPUs hold without our workers.
void elastic_agent::impl::start_gpu_watch() {
  auto& nvml = env_.nvml();
  if (!nvml.available()) {
    log_debug(fmt::format("no GPU checks: {}", nvml.why_unavailable()));
    return;
  }
  // NCCL jobs: torch's flight recorder, so a collective's timeout leaves
  // each rank's last collectives behind (docs/agent.md, "Failure classes").
  nccl_traces_ = !nvml_gpus(nvml).empty();
  if (options_.gpu_reclaim_timeout.count() <= 0) return;  // not waited for: no baseline
  gpu_baseline_ = read_gpu_memory_levels(nvml, {});
  reclaim_.emplace(io_, nvml);
}

// `then` once the GPUs are back (at once without NVML or GPUs); else the
// node leaves the job with the reason.
void elastic_agent::impl::after_gpus_reclaimed(std::function<void()> then) {
  if (!reclaim_) return then();  // no NVML, or --gpu-reclaim-timeout=0
  gpu_reclaim_waiter::options o;
  for (const auto& w : group_.workers()) o.previous_pids.push_back(w.pid);
  o.baseline = gpu_baseline_;
  o.timeout = options_.gpu_reclaim_timeout;
  phase_ = phase::reclaiming;
  reclaim_->start(std::move(o), [this, then](gpu_reclaim_waiter::result r) {
    // A signal ended the run meanwhile (or will, once the store has it).
    if (phase_ != phase::reclaiming || signalled()) return;
    if (r.reclaimed) return then();
    // Said once: quarantine says it with what happens next.
    if (options_.quarantine.enabled()) return machine_failed(r.reason, -1, "gpu-reclaim");
    log_error(r.reason);
    reporter_.node_left(r.reason);
    rendezvous_.leave_job(records::leaving(failure_class::health, r.reason),
                          [this] { finish(exit_node_unhealthy); });
  });
}

}  // namespace dtrun::agent
