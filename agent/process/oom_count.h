// The kernel's own count of OOM kills for a memory cgroup: the proof that
// a worker killed by SIGKILL was the OOM killer's victim (failure_class.h),
// rather than a guess from the signal.
//   cgroup v2: <dir>/memory.events, "oom_kill N" (the cgroup and below)
//   cgroup v1: <dir>/memory.oom_control, "oom_kill N" (kernel 4.13+)
// Workers are forked by the agent, so they start in its memory cgroup:
// the agent reads the count when a round's workers start and again when
// one of them dies of a SIGKILL it did not send.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrun::agent {

// The memory cgroup folder of the process `pid` ("self" for this one),
// from /proc/<pid>/cgroup and /proc/self/mountinfo under `root` (normally
// "/"): the v1 memory controller's mount when there is one, else the v2
// unified hierarchy's. Empty when there is no memory cgroup to read.
std::string memory_cgroup_dir(const std::string& pid = "self", const std::string& root = "/");

// The OOM kills counted for `dir`; nullopt when the file is missing or
// says no count (an old kernel, no memory controller).
std::optional<std::uint64_t> oom_kill_count(const std::string& dir);

}  // namespace dtrun::agent
