// What a hang (--hang-timeout) report says, from the workers' stacks:
// where each rank is, the summary, and which workers are blamed. Pure
// functions, so the choice is tested without processes.
//
// The culprits:
// Ranks are grouped by where their main thread is (stuck_at). The
// smallest group is the one stuck apart (one data-loading rank while the
// rest wait in a collective); between groups of one size, those stuck in
// their own code rather than in a library's. When that does not decide
// (every rank in one place, every group alike, or no stack at all), every
// live worker is a culprit.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/process/worker_group.h"
#include "agent/watch/stack_capture.h"

namespace dtrun::agent {

// `stacks`: this capture's results (those of exited workers are ignored);
// `live`: the local ranks of the workers still running.
std::set<int> hang_culprits(const std::vector<captured_stack>& stacks,
                            const std::vector<int>& live);

struct hang_report {
  std::vector<std::string> summary_lines;  // "hang summary (...):" and its lines
  std::map<int, std::string> where;        // local rank -> "load_batch (train.py:42)"
  std::map<int, std::string> files;        // local rank -> its stacks file
  std::set<int> culprits;                  // local ranks to kill first
};

// The report of one capture. `file_of(local_rank)` names a rank's stacks
// file (-1: the pattern, for the summary's header).
hang_report make_hang_report(const std::vector<captured_stack>& stacks,
                             const std::vector<worker>& workers,
                             const std::function<std::string(int local_rank)>& file_of);

}  // namespace dtrun::agent
