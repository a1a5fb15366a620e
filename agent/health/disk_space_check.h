// A node health check's built-in (docs/agent.md "Node health"): enough
// free space under a folder (the run folder, where logs, error files and
// checkpoints go). A full disk fails a job late and obscurely (a
// truncated checkpoint, a worker that dies writing its log); checked
// before the node joins, it is one line naming the folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/health/node_health.h"

namespace dtrun::agent {

constexpr std::uint64_t default_min_free_bytes = std::uint64_t{1} << 30;  // 1 GiB

// `path` as a word a user can paste after a command: as it is when it is
// plain, else single-quoted (and printable).
std::string shell_word(const std::string& path);

// "512 B", "1.5 KiB", "3 GiB": binary units, at most one decimal.
std::string format_free_bytes(std::uint64_t bytes);

// The finding (check "disk") for `folder` with `free_bytes` available to
// an unprivileged user, or nullopt with `error` when they could not be
// read: unhealthy below `min_free_bytes` or on an error, its reason naming
// the folder, what is free, and `df -h FOLDER` to check by hand.
health_finding disk_space_finding(const std::string& folder,
                                  std::optional<std::uint64_t> free_bytes,
                                  const std::string& error, std::uint64_t min_free_bytes,
                                  bool gating);

// statvfs(folder) judged by disk_space_finding. One system call: quick
// on a local disk (a hung network mount could block it; the agent asks
// for the run folder, which is its own).
health_finding check_disk_space(const std::string& folder,
                                std::uint64_t min_free_bytes = default_min_free_bytes,
                                bool gating = false);

}  // namespace dtrun::agent
