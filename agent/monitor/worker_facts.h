// What `dtrun status` and /metrics say of each worker of this node: its
// state, exit code, start time, and its output (how long since its last
// line, the line itself) where the agent sees that output.
#pragma once

#include <vector>

#include "agent/monitor/job_status.h"
#include "agent/output/worker_output.h"
#include "agent/process/worker_group.h"
#include "agent/spec/log_spec.h"
#include "agent/watch/progress_monitor.h"
#include "agent/watch/progress_page.h"

namespace dtrun::agent {

// What the workers' progress pages say (step, section) where they wrote
// them, else --progress-file's step for all.
struct worker_progress_facts {
  const progress_pages* pages = nullptr;
  std::optional<std::int64_t> file_step;
};

// `stopping`: the group is being stopped (its live workers say so);
// `progress`: the hang detector, when --hang-timeout is on (null: off).
// Each worker's entry of the status (job_status.h), as far as the agent
// knows it: the monitor adds what it measures.
std::vector<worker_status> worker_facts(const std::vector<worker>& workers, bool stopping,
                                        const log_spec& logs, const progress_monitor* progress,
                                        const worker_output& output,
                                        const worker_progress_facts& steps = {});

}  // namespace dtrun::agent
