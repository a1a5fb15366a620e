// The straggler figures as they travel between agents (issue 48, item 2;
// docs/stragglers.md), one codec each way:
// - a node's work: its ranks' rank_work_sample of one interval, written by
//   each node under a key of the round ("dtrun.work/1"; about 60 bytes a
//   rank, so at most 64 ranks a node is at most about 4 KiB);
// - the job's verdict: the stragglers named and still slow, written by the
//   round's node 0 and read by every node ("dtrun.stragglers/1"), each with
//   the host it runs on so that every node can say who it is.
// Readers never throw: a document of another schema or ill-typed reads as
// nothing (and says why), a field out of range drops its entry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/watch/straggler_detector.h"

namespace dtrun::agent {

inline constexpr std::string_view work_schema = "dtrun.work/1";
inline constexpr std::string_view stragglers_schema = "dtrun.stragglers/1";

// The most ranks one node's work document carries (the rest are left out).
inline constexpr std::size_t work_max_ranks = 512;

// One rank's completed steps, as the agent reads them from its progress
// page: the step number and its own work in ns (0: not timed).
struct timed_step {
  std::int64_t step = 0;
  std::int64_t own_ns = 0;
};

// The sample of one rank over the steps after `after` (those it has not
// published yet); nullopt when none of them was timed.
std::optional<rank_work_sample> summarize_steps(int rank, int node_rank,
                                                const std::vector<timed_step>& steps,
                                                std::int64_t after);

// One node's figures and the host it runs on (so that node 0 can name it).
struct node_work {
  std::string host;
  std::vector<rank_work_sample> ranks;
};

std::string encode_work(const std::string& host, const std::vector<rank_work_sample>& samples);
node_work decode_work(std::string_view text, std::string& error);

// A straggler as the verdict names it: the finding, its node's host, and
// what node 0 decided it does: leave (--straggler-action leave or
// quarantine, with room for the job to lose it) or stay, and why it stays
// when the action would have sent it away.
struct named_straggler {
  straggler_finding finding;
  std::string host;
  bool leaves = false;
  std::string kept_because;
};

std::string encode_stragglers(const std::vector<named_straggler>& stragglers);
// One entry of the verdict, as `dtrun status` also carries it; nullopt
// for an entry without the finding's fields (never throws).
nlohmann::json straggler_json(const named_straggler& named);
std::optional<named_straggler> straggler_from_json(const nlohmann::json& entry);
std::vector<named_straggler> decode_stragglers(std::string_view text, std::string& error);

}  // namespace dtrun::agent
