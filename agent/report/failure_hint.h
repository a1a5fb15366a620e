// One line for the failure summary that says what to do, chosen by the
// cause the record shows, on the node where the worker ran (its
// interpreter and its cgroup are that node's):
//   - torch cannot be imported: which interpreter ran, and how to choose
//     another (--python, DTRUN_PYTHON, PATH);
//   - killed by SIGKILL that dtrun did not send: most often the kernel's
//     OOM killer; where to look (dmesg, the cgroup's memory.events);
//   - a SyntaxError, or Python that could not open the script: the script
//     never ran, so torch's @record could not have helped.
// Empty when no cause is recognised: the summary then suggests @record.
#pragma once

#include <string>

#include "agent/report/failure_record.h"

namespace dtrun::agent {

// `interpreter`: "/usr/bin/python3 (python3 on PATH)" for Python workers,
// empty for --no-python programs. `cgroup_dir`: this process's cgroup v2
// folder (/sys/fs/cgroup/...), empty when unknown.
std::string failure_hint(const failure_record& record, const std::string& interpreter,
                         const std::string& cgroup_dir);

// The cgroup v2 folder of this process (from /proc/self/cgroup under
// `root`, normally "/"), where memory.events counts OOM kills; empty when
// there is none (cgroup v1).
std::string own_cgroup_dir(const std::string& root = "/");

}  // namespace dtrun::agent
