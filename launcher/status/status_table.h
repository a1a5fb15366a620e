// The human form of `dtrun status`: a job line (and a line for each fact
// the job has to tell: failures, restarts by class, goodput, --preflight's
// verdict, each failing node health check), a nodes table (multi-node
// only) and a workers table, in fixed-width columns. Pure: tested without
// agents.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/monitor/job_status.h"

namespace dtrun::launcher {

// Renders `status` as of wall-clock time `now` (Unix seconds; uptimes and
// heartbeat ages are computed from it). Text from other processes (run id,
// host, phase, state) is made printable. Unknown values show as "-".
std::string render_status(const agent::job_status& status, double now);

// 1536 -> "1.5 KiB"; bytes under 1 KiB as "512 B".
std::string human_bytes(std::uint64_t bytes);
// 59 -> "59s", 61 -> "1m01s", 3700 -> "1h01m", 90000 -> "1d01h".
std::string human_duration(double seconds);

}  // namespace dtrun::launcher
