#include "agent/report/failure_hint.h"

#include <csignal>
#include <fstream>

#include <fmt/format.h>

namespace dtrun::agent {
namespace {

// The error file's message, else the redirected stderr's last lines: the
// worker's own words, wherever dtrun could read them.
bool says(const failure_record& r, const std::string& text) {
  if (r.message.find(text) != std::string::npos) return true;
  for (const auto& line : r.log_tail) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

bool torch_missing(const failure_record& r) {
  return says(r, "No module named 'torch'") || says(r, "No module named 'torch.");
}

}  // namespace

std::string failure_hint(const failure_record& r, const std::string& interpreter,
                         const std::string& cgroup_dir) {
  if (torch_missing(r)) {
    if (interpreter.empty()) {
      return "the program's Python cannot import torch; run the Python that has it";
    }
    return fmt::format(
        "the workers ran {}, which cannot import torch; choose the Python that has it with "
        "--python=/path/to/python3 (or DTRUN_PYTHON), or put its folder first on PATH",
        interpreter);
  }
  if (r.failure_class == "oom-kill") {
    return "the kernel's OOM killer killed it (its memory cgroup counted the kill): the node ran "
           "out of memory; use less memory per worker (batch size, data loader workers) or run "
           "fewer workers per node";
  }
  if (r.signal == SIGKILL && r.hang.empty() && r.watchdog.empty()) {
    std::string events = cgroup_dir.empty() ? std::string("memory.events of the job's cgroup")
                                            : cgroup_dir + "/memory.events";
    return fmt::format(
        "SIGKILL that dtrun did not send: most often the kernel's OOM killer (out of memory); "
        "look for 'Killed process {}' in `dmesg` (or `journalctl -k`) and for oom_kill in {}",
        r.pid, events);
  }
  if (says(r, "SyntaxError") || says(r, "IndentationError")) {
    return "the script does not compile (fix the line shown); it never ran, so @record could "
           "not report it";
  }
  if (says(r, "can't open file")) {
    return "Python could not open the script; check its path and permissions (it never ran, "
           "so @record could not report it)";
  }
  return "";
}

std::string own_cgroup_dir(const std::string& root) {
  std::ifstream in(root + "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // cgroup v2: "0::/user.slice/..."; v1 lines have a controller list.
    if (line.rfind("0::", 0) == 0) {
      std::string path = line.substr(3);
      if (path == "/") path.clear();
      return root + "sys/fs/cgroup" + path;
    }
  }
  return "";
}

}  // namespace dtrun::agent
