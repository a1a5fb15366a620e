// One failure summary for a job launched over ssh (dtrun --hosts): every
// host's agent prints the job-wide summary (agent/report/failure_report.h), read
// through the rendezvous store, so they agree on the root cause; the
// launching dtrun shows one of them, with the other hosts' "stopped by
// dtrun" lines added, and exits with the root cause's code. Pure text
// handling, unit-tested.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

// The rule that opens and closes a summary: "dtrun: =====...".
bool is_summary_rule(std::string_view line);

// The first block (rules included), with each "stopped by dtrun" line of
// the other blocks that it lacks added before its closing rule. `blocks`
// is non-empty and each block has both rules.
std::vector<std::string> merge_summaries(const std::vector<std::vector<std::string>>& blocks);

// The root cause's exit code, from the block's "exit : ... exit code N"
// line; nullopt when there is none.
std::optional<int> summary_exit_code(const std::vector<std::string>& block);

}  // namespace dtrun::launcher
