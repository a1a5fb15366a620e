// Discovery on fake /sys and /proc trees built in a temporary folder: the
// drivers' files as they look on real machines, one kind of GPU at a time.
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/devices/accelerators.h"
#include "rendezvous/base/env_map.h"

using namespace dtrun::agent;
using dtrun::env_map;
namespace fs = std::filesystem;

namespace {

class fake_root {
 public:
  fake_root() {
    std::string pattern = (fs::temp_directory_path() / "dtrun-sysfs-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~fake_root() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fake_root(const fake_root&) = delete;
  fake_root& operator=(const fake_root&) = delete;

  void write(const std::string& relative, const std::string& text) const {
    fs::path file = path_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }

  // An NVIDIA GPU as the driver lists it, on `numa_node`.
  void nvidia(const std::string& address, const std::string& uuid, int numa_node) const {
    write("proc/driver/nvidia/gpus/" + address + "/information",
          "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t " + uuid +
              "\nBus Location: \t " + address + "\n");
    write("sys/bus/pci/devices/" + address + "/numa_node", std::to_string(numa_node) + "\n");
  }

  // A KFD topology node: CPU nodes have gpu_id 0.
  void kfd_node(int node, int gpu_id, int domain, int location_id,
                unsigned long long unique_id) const {
    std::string dir = "sys/class/kfd/kfd/topology/nodes/" + std::to_string(node);
    write(dir + "/gpu_id", std::to_string(gpu_id) + "\n");
    write(dir + "/properties", "cpu_cores_count 0\nsimd_count 304\nvendor_id 4098\ndomain " +
                                   std::to_string(domain) + "\nlocation_id " +
                                   std::to_string(location_id) + "\nunique_id " +
                                   std::to_string(unique_id) + "\n");
  }

  void render_node(const std::string& name, const std::string& driver,
                   const std::string& address) const {
    write("sys/class/drm/" + name + "/device/uevent",
          "DRIVER=" + driver + "\nPCI_CLASS=30000\nPCI_SLOT_NAME=" + address + "\n");
  }

  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::vector<std::string> addresses(const std::vector<accelerator>& devices) {
  std::vector<std::string> out;
  for (const auto& d : devices) out.push_back(d.pci_address);
  return out;
}

std::vector<std::string> selectors(const std::vector<accelerator>& devices) {
  std::vector<std::string> out;
  for (const auto& d : devices) out.push_back(d.selector);
  return out;
}

// Four NVIDIA GPUs, listed out of order on purpose.
void four_nvidia(const fake_root& root) {
  root.nvidia("0000:B1:00.0", "GPU-dddd4444-0000-0000-0000-000000000000", 1);
  root.nvidia("0000:1b:00.0", "GPU-aaaa1111-0000-0000-0000-000000000000", 0);
  root.nvidia("0000:88:00.0", "GPU-cccc3333-0000-0000-0000-000000000000", 1);
  root.nvidia("0000:3b:00.0", "GPU-aaaa2222-0000-0000-0000-000000000000", 0);
}

}  // namespace

TEST_CASE("NVIDIA GPUs are listed in PCI bus order with their UUIDs") {
  fake_root root;
  four_nvidia(root);
  auto gpus = visible_gpus(root.str(), {});
  CHECK(addresses(gpus) ==
        std::vector<std::string>{"0000:1b:00.0", "0000:3b:00.0", "0000:88:00.0", "0000:b1:00.0"});
  CHECK(gpus[1].uuid == "GPU-aaaa2222-0000-0000-0000-000000000000");
  CHECK(selectors(gpus) == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(pci_numa_node(root.str(), gpus[2].pci_address) == 1);
  CHECK(gpus[0].kind == accelerator_kind::cuda);
}

TEST_CASE("CUDA_VISIBLE_DEVICES picks and orders GPUs by index as torch parses it") {
  fake_root root;
  four_nvidia(root);
  auto with = [&](const std::string& value) {
    return addresses(visible_gpus(root.str(), {{"CUDA_VISIBLE_DEVICES", value}}));
  };
  CHECK(with("3,1") == std::vector<std::string>{"0000:b1:00.0", "0000:3b:00.0"});
  // strtoul-like: leading digits count and the rest of the entry is ignored.
  CHECK(with("1gpu2,2ampere") == std::vector<std::string>{"0000:3b:00.0", "0000:88:00.0"});
  CHECK(with(" 2, +3") == std::vector<std::string>{"0000:88:00.0", "0000:b1:00.0"});
  // The list stops at the first negative or invalid entry.
  CHECK(with("0,1,-1,3").size() == 2);
  CHECK(with("4,3,two,one").empty());  // 4 is out of range: cut there
  CHECK(with("2,7,0") == std::vector<std::string>{"0000:88:00.0"});
  CHECK(with("one,two,3").empty());
  // A device named twice leaves none; an empty value leaves none.
  CHECK(with("0,1,2,1").empty());
  CHECK(with("").empty());
  CHECK(selectors(visible_gpus(root.str(), {{"CUDA_VISIBLE_DEVICES", "3,+1"}})) ==
        std::vector<std::string>{"3", "1"});
}

TEST_CASE("CUDA_VISIBLE_DEVICES picks GPUs by unique UUID prefix") {
  fake_root root;
  four_nvidia(root);
  auto with = [&](const std::string& value) {
    return addresses(visible_gpus(root.str(), {{"CUDA_VISIBLE_DEVICES", value}}));
  };
  CHECK(with("GPU-cccc,GPU-aaaa1") == std::vector<std::string>{"0000:88:00.0", "0000:1b:00.0"});
  // An ambiguous prefix (two GPU-aaaa...) ends the list there.
  CHECK(with("GPU-dddd,GPU-aaaa,GPU-cccc") == std::vector<std::string>{"0000:b1:00.0"});
  // So does an entry that is not a UUID.
  CHECK(with("GPU-dddd,0").size() == 1);
  CHECK(with("GPU-dddd,GPU-dddd").empty());
  CHECK(with("GPU-ffff").empty());
  CHECK(selectors(visible_gpus(root.str(), {{"CUDA_VISIBLE_DEVICES", "GPU-cccc"}})) ==
        std::vector<std::string>{"GPU-cccc"});
}

TEST_CASE("MIG instances count one device each without a PCI address") {
  fake_root root;
  four_nvidia(root);
  auto gpus = visible_gpus(root.str(), {{"CUDA_VISIBLE_DEVICES", "MIG-1234,MIG-5678,0"}});
  CHECK(gpus.size() == 2);
  CHECK(gpus[0].pci_address.empty());
}

TEST_CASE("no driver means no GPU") {
  fake_root root;
  root.write("proc/cpuinfo", "processor : 0\n");
  auto found = discover_accelerators(root.str(), {});
  CHECK(found.gpus().empty());
  CHECK(found.xpu.empty());
  CHECK_FALSE(pci_numa_node(root.str(), "0000:00:01.0"));
}

TEST_CASE("AMD GPUs come from the KFD topology with ROCR then HIP visibility") {
  fake_root root;
  root.kfd_node(0, 0, 0, 0, 0);                                 // the CPU
  root.kfd_node(1, 1111, 0, (0x0c << 8) | (0 << 3) | 0, 0xabcdef0123456789ULL);
  root.kfd_node(2, 2222, 0, (0x22 << 8), 0x1111222233334444ULL);
  root.kfd_node(10, 3333, 1, (0x9a << 8) | (1 << 3) | 2, 0x5555666677778888ULL);
  root.write("sys/bus/pci/devices/0000:22:00.0/numa_node", "-1\n");
  auto all = discover_accelerators(root.str(), {});
  CHECK(all.cuda.empty());
  CHECK(addresses(all.gpus()) ==
        std::vector<std::string>{"0000:0c:00.0", "0000:22:00.0", "0001:9a:01.2"});
  CHECK(all.gpus()[0].uuid == "abcdef0123456789");
  CHECK(all.gpus()[0].kind == accelerator_kind::rocm);
  // -1 (no NUMA information) is node 0, as torch reads it.
  CHECK(pci_numa_node(root.str(), "0000:22:00.0") == 0);

  auto with = [&](const env_map& env) {
    return addresses(discover_accelerators(root.str(), env).gpus());
  };
  CHECK(with({{"HIP_VISIBLE_DEVICES", "2,0"}}) ==
        std::vector<std::string>{"0001:9a:01.2", "0000:0c:00.0"});
  // Without HIP's or ROCR's variable the HIP runtime reads CUDA's.
  CHECK(with({{"CUDA_VISIBLE_DEVICES", "1"}}) == std::vector<std::string>{"0000:22:00.0"});
  // ROCR narrows first; HIP's ordinals index what ROCR left.
  CHECK(with({{"ROCR_VISIBLE_DEVICES", "2,1"}, {"HIP_VISIBLE_DEVICES", "1"}}) ==
        std::vector<std::string>{"0000:22:00.0"});
  CHECK(with({{"ROCR_VISIBLE_DEVICES", "GPU-5555"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}) ==
        std::vector<std::string>{"0001:9a:01.2"});
  CHECK(with({{"HIP_VISIBLE_DEVICES", ""}}).empty());
}

TEST_CASE("Intel GPUs are the i915 and xe render nodes narrowed by ZE_AFFINITY_MASK") {
  fake_root root;
  root.render_node("renderD129", "xe", "0000:4D:00.0");
  root.render_node("renderD128", "i915", "0000:00:02.0");
  root.render_node("renderD130", "amdgpu", "0000:c1:00.0");
  root.write("sys/class/drm/card0/device/uevent", "DRIVER=i915\nPCI_SLOT_NAME=0000:00:02.0\n");
  auto all = discover_accelerators(root.str(), {});
  CHECK(addresses(all.xpu) == std::vector<std::string>{"0000:00:02.0", "0000:4d:00.0"});
  CHECK(all.gpus().empty());
  auto with = [&](const std::string& mask) {
    return addresses(discover_accelerators(root.str(), {{"ZE_AFFINITY_MASK", mask}}).xpu);
  };
  CHECK(with("1") == std::vector<std::string>{"0000:4d:00.0"});
  CHECK(with("1.0,1.1,0") == std::vector<std::string>{"0000:00:02.0", "0000:4d:00.0"});
  CHECK(with("5,x").empty());
  CHECK(with("").size() == 2);
}

TEST_CASE("nproc-per-node cpu counts the CPUs this process may run on, as torch 2.12") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(usable_cpu_count() == CPU_COUNT(&set));
}
