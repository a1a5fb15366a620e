#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "agent/process/oom_count.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("the memory cgroup is found for cgroup v1 and v2 mounts", "[oom_count]") {
  testing::scoped_temp_dir root("oomroot");
  auto r = root.path.string() + "/";
  // Hybrid (v1 memory controller + unified): v1's memory wins, where the
  // oom_kill count of a v1 hierarchy is.
  write(root.path / "proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  write(root.path / "proc/self/cgroup", "4:memory:/jobs/7\n0::/\n");
  CHECK(memory_cgroup_dir("self", r) == r + "sys/fs/cgroup/memory/jobs/7");

  // Pure v2; a container whose mount root is its own sub-tree.
  write(root.path / "proc/42/cgroup", "0::/kubepods/pod1/c1\n");
  write(root.path / "proc/self/mountinfo",
        "41 31 0:38 /kubepods/pod1 /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n");
  CHECK(memory_cgroup_dir("42", r) == r + "sys/fs/cgroup/c1");
  CHECK(memory_cgroup_dir("43", r).empty());  // no such process
}

TEST_CASE("the OOM kill count is the kernel's, in either hierarchy's file", "[oom_count]") {
  testing::scoped_temp_dir dir("oomcount");
  auto d = dir.path.string();
  CHECK_FALSE(oom_kill_count(d));
  CHECK_FALSE(oom_kill_count(""));
  write(dir.path / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  CHECK(oom_kill_count(d) == 3u);
  write(dir.path / "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n");
  CHECK(oom_kill_count(d) == 2u);  // v2's file first
  write(dir.path / "memory.events", "oom_kill lots\n");
  CHECK_FALSE(oom_kill_count(d));
}

TEST_CASE("this process's own memory cgroup is readable here", "[oom_count]") {
  auto dir = memory_cgroup_dir();
  if (dir.empty()) {
    WARN("no memory cgroup on this machine: nothing to read");
    return;
  }
  CHECK(fs::is_directory(dir));
}
