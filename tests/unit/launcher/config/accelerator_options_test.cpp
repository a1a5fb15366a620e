// --nproc-per-node=gpu/xpu/auto and --numa-binding as resolved from the
// command line, on a fake /sys and /proc tree (DTRUN_SYSTEM_ROOT).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/devices/cpu_list.h"
#include "agent/devices/cpu_topology.h"
#include "launcher/cli/cli.h"
#include "launcher/config/launch_config.h"
#include "launcher/config/resolve_launch_config.h"
#include "rendezvous/base/env_map.h"
#include "tests/unit/launcher/env_guard.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;
namespace fs = std::filesystem;

namespace {

// Two NVIDIA GPUs on NUMA node 1 and one on node 0 (none numbered in PCI
// order by the folder listing).
class fake_machine {
 public:
  fake_machine() {
    std::string pattern = (fs::temp_directory_path() / "dtrun-machine-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    root_ = pattern;
    gpu("0000:c1:00.0", "GPU-cccc", "1");
    gpu("0000:41:00.0", "GPU-aaaa", "0");
    gpu("0000:81:00.0", "GPU-bbbb", "1");
  }
  ~fake_machine() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fake_machine(const fake_machine&) = delete;
  fake_machine& operator=(const fake_machine&) = delete;

  void gpu(const std::string& address, const std::string& uuid, const std::string& node) const {
    write("proc/driver/nvidia/gpus/" + address + "/information", "GPU UUID: \t " + uuid + "\n");
    write("sys/bus/pci/devices/" + address + "/numa_node", node + "\n");
  }
  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  void remove(const std::string& relative) const { fs::remove(root_ / relative); }
  std::string str() const { return root_.string(); }

 private:
  fs::path root_;
};

launch_options options(std::vector<std::string> args) {
  args.push_back("train.py");
  return parse_command_line(args).options;
}

std::string error_of(const launch_options& o, const dtrun::env_map& env) {
  try {
    resolve_launch_config(o, env);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("nproc gpu counts the GPUs CUDA_VISIBLE_DEVICES leaves") {
  fake_machine machine;
  auto nproc = [&](dtrun::env_map env) {
    env["DTRUN_SYSTEM_ROOT"] = machine.str();
    return resolve_launch_config(options({"--nproc-per-node=gpu"}), env).nproc_per_node();
  };
  CHECK(nproc({}) == 3);
  CHECK(nproc({{"CUDA_VISIBLE_DEVICES", "2,0"}}) == 2);
  CHECK(nproc({{"CUDA_VISIBLE_DEVICES", "0,5,1"}}) == 1);
  CHECK(nproc({{"CUDA_VISIBLE_DEVICES", "GPU-bbbb"}}) == 1);
  CHECK(resolve_launch_config(options({"--nproc-per-node=auto"}),
                              {{"DTRUN_SYSTEM_ROOT", machine.str()}})
            .nproc_per_node() == 3);
  CHECK(error_of(options({"--nproc-per-node=gpu"}),
                 {{"DTRUN_SYSTEM_ROOT", machine.str()}, {"CUDA_VISIBLE_DEVICES", ""}}) ==
        "--nproc-per-node=gpu but no GPU is visible (CUDA_VISIBLE_DEVICES=''); give a number or "
        "'cpu'");
  CHECK(error_of(options({"--nproc-per-node=gpu"}),
                 {{"DTRUN_SYSTEM_ROOT", machine.str()}, {"CUDA_VISIBLE_DEVICES", "-1"}}) != "");
}

TEST_CASE("nproc gpu from PET_NPROC_PER_NODE names the variable in its error") {
  fake_machine machine;
  env_guard nproc("PET_NPROC_PER_NODE", "gpu");
  CHECK(error_of(options({}),
                 {{"DTRUN_SYSTEM_ROOT", machine.str()}, {"CUDA_VISIBLE_DEVICES", ""}}) ==
        "PET_NPROC_PER_NODE: --nproc-per-node=gpu but no GPU is visible "
        "(CUDA_VISIBLE_DEVICES=''); give a number or 'cpu'");
}

TEST_CASE("numa-binding takes both spellings and only torch's modes") {
  CHECK(options({"--numa-binding=exclusive"}).numa_binding == "exclusive");
  CHECK(options({"--numa_binding", "core-complex"}).numa_binding == "core-complex");
  CHECK(options({}).numa_binding.empty());
  CHECK_THROWS_WITH(options({"--numa-binding=core_complex"}),
                    Catch::StartsWith("--numa-binding: core_complex not in "
                                      "{node,socket,exclusive,core-complex}"));
}

TEST_CASE("numa-binding is not read from PET_NUMA_BINDING as torchrun does not") {
  env_guard binding("PET_NUMA_BINDING", "node");
  CHECK(options({}).numa_binding.empty());
}

TEST_CASE("numa-binding maps local rank n to visible GPU n") {
  fake_machine machine;
  auto topology = dtrun::agent::synthetic_cpu_topology("package:2 numa:1 core:4 pu:2");
  auto gpus = dtrun::agent::visible_gpus(machine.str(), {});
  auto as_text = [](const std::vector<std::vector<int>>& per_rank) {
    std::vector<std::string> out;
    for (const auto& cpus : per_rank) out.push_back(dtrun::agent::format_cpu_list(cpus));
    return out;
  };
  // GPUs in PCI order: 41 (node 0), 81 (node 1), c1 (node 1).
  CHECK(as_text(resolve_numa_binding("node", gpus, machine.str(), topology, 3)) ==
        std::vector<std::string>{"0-7", "8-15", "8-15"});
  CHECK(as_text(resolve_numa_binding("exclusive", gpus, machine.str(), topology, 3)) ==
        std::vector<std::string>{"0-7", "8-11", "12-15"});
  auto reordered = dtrun::agent::visible_gpus(machine.str(), {{"CUDA_VISIBLE_DEVICES", "2,0"}});
  CHECK(as_text(resolve_numa_binding("node", reordered, machine.str(), topology, 2)) ==
        std::vector<std::string>{"8-15", "0-7"});
}

TEST_CASE("numa-binding refuses a GPU whose NUMA node cannot be read") {
  fake_machine machine;
  machine.remove("sys/bus/pci/devices/0000:81:00.0/numa_node");
  auto topology = dtrun::agent::synthetic_cpu_topology("package:2 numa:1 core:4 pu:2");
  auto gpus = dtrun::agent::visible_gpus(machine.str(), {});
  CHECK_THROWS_WITH(resolve_numa_binding("socket", gpus, machine.str(), topology, 1),
                    "--numa-binding=socket: cannot tell GPU 1's NUMA node (" + machine.str() +
                        "/sys/bus/pci/devices/0000:81:00.0/numa_node is unreadable); drop "
                        "--numa-binding");
  CHECK_THROWS_AS(resolve_numa_binding("sockets", gpus, machine.str(), topology, 1), usage_error);
}

TEST_CASE("numa-binding on a machine without GPUs is a usage error") {
  fake_machine machine;
  CHECK(error_of(options({"--numa-binding=node", "--nproc-per-node=2"}),
                 {{"DTRUN_SYSTEM_ROOT", machine.str()}, {"CUDA_VISIBLE_DEVICES", ""}}) ==
        "--numa-binding=node binds local rank n near GPU n, but no GPU is visible; drop "
        "--numa-binding on machines without GPUs");
}
