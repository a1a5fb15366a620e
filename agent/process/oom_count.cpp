#include "agent/process/oom_count.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

struct cgroup_mount {
  std::string root;         // the mount's root inside its hierarchy
  std::string mount_point;  // where it is mounted
};

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, by)) parts.push_back(part);
  return parts;
}

// The mount of the v1 memory controller (`v2` false) or of the v2 unified
// hierarchy (`v2` true), from mountinfo: "36 31 0:32 / /sys/fs/cgroup/memory
// rw,relatime - cgroup cgroup rw,memory".
std::optional<cgroup_mount> find_mount(const std::string& root, bool v2) {
  std::ifstream in(root + "proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto before = split(line.substr(0, dash), ' ');
    auto after = split(line.substr(dash + 3), ' ');
    if (before.size() < 5 || after.size() < 3) continue;
    bool match = v2 ? after[0] == "cgroup2"
                    : after[0] == "cgroup" && ("," + after[2] + ",").find(",memory,") !=
                                                  std::string::npos;
    if (match) return cgroup_mount{before[3], before[4]};
  }
  return std::nullopt;
}

std::string join_under(const cgroup_mount& mount, std::string path, const std::string& root) {
  // In a cgroup namespace or a container the mount's root may be a
  // sub-tree: the process's path is then relative to it.
  if (mount.root != "/" && path.rfind(mount.root, 0) == 0) path = path.substr(mount.root.size());
  if (path == "/") path.clear();
  std::string base = mount.mount_point;
  if (!root.empty() && root != "/") base = root + base.substr(1);
  return base + path;
}

}  // namespace

std::string memory_cgroup_dir(const std::string& pid, const std::string& root) {
  std::ifstream in(root + "proc/" + pid + "/cgroup");
  std::string line;
  std::optional<std::string> v1_path;
  std::optional<std::string> v2_path;
  while (std::getline(in, line)) {
    // "4:memory:/a/b" (v1), "0::/a/b" (v2).
    auto first = line.find(':');
    auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (line.rfind("0::", 0) == 0) {
      v2_path = path;
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      v1_path = path;
    }
  }
  if (v1_path) {
    if (auto mount = find_mount(root, false)) return join_under(*mount, *v1_path, root);
  }
  if (v2_path) {
    if (auto mount = find_mount(root, true)) return join_under(*mount, *v2_path, root);
  }
  return "";
}

std::optional<std::uint64_t> oom_kill_count(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  for (const char* file : {"/memory.events", "/memory.oom_control"}) {
    std::ifstream in(dir + file);
    std::string key;
    std::string value;
    while (in >> key >> value) {
      if (key != "oom_kill") continue;
      return parse_whole<std::uint64_t>(value);
    }
  }
  return std::nullopt;
}

}  // namespace dtrun::agent
