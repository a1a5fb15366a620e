#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/health/machine_identity.h"
#include "tests/unit/agent/fake_nvml_functions.h"

using namespace dtrun::agent;
namespace scripted_nvml = fake_nvml_functions;

namespace {

std::string temp_machine_id_file(const std::string& content) {
  std::string path = "/tmp/dtrun-machine-id-XXXXXX";
  int fd = ::mkstemp(path.data());
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << content;
  return path;
}

}  // namespace

TEST_CASE("machine identity: machine-id read trimmed, the first readable file wins",
          "[gpu-health]") {
  auto path = temp_machine_id_file("  0123456789abcdef0123456789abcdef\n");
  CHECK(read_machine_id({"/nonexistent/machine-id", path}) == "0123456789abcdef0123456789abcdef");
  auto empty = temp_machine_id_file("\n");
  CHECK(read_machine_id({empty}).empty());
  CHECK(read_machine_id({"/nonexistent/machine-id"}).empty());
  ::unlink(path.c_str());
  ::unlink(empty.c_str());
}

TEST_CASE("machine identity: the same GPUs in another order give the same key",
          "[gpu-health]") {
  auto a = make_machine_identity("0123456789abcdef0123456789abcdef\n", {"GPU-a", "GPU-b"}, "n1");
  auto b = make_machine_identity("0123456789abcdef0123456789abcdef", {"GPU-b", "GPU-a"}, "n2");
  CHECK(a.key == b.key);  // another host name, the same machine
  CHECK(a.key.rfind("0123456789ab:", 0) == 0);
  CHECK(a.key.size() == 12 + 1 + 12);
  CHECK(a.label == "n1 (machine 0123456789ab)");
  CHECK(a.gpu_uuids == std::vector<std::string>{"GPU-a", "GPU-b"});
  // Stable across builds: FNV-1a, not std::hash.
  CHECK(make_machine_identity("0123456789abcdef", {"GPU-a", "GPU-b"}, "n1").key == a.key);
}

TEST_CASE("machine identity: another machine-id or other GPUs give another key",
          "[gpu-health]") {
  auto a = make_machine_identity("0123456789abcdef", {"GPU-a"}, "node");
  CHECK(make_machine_identity("fedcba9876543210", {"GPU-a"}, "node").key != a.key);
  CHECK(make_machine_identity("0123456789abcdef", {"GPU-c"}, "node").key != a.key);
  CHECK(make_machine_identity("0123456789abcdef", {}, "node").key == "0123456789ab");
  auto nameless = make_machine_identity("", {}, "node7");
  CHECK(nameless.key == "host-node7");
  CHECK_THAT(nameless.label, Catch::Contains("no machine-id"));
}

TEST_CASE("machine identity: GPU UUIDs from NVML", "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  CHECK(nvml_gpu_uuids(nvml) ==
        std::vector<std::string>{"GPU-00000000-0000-0000-0000-000000000000",
                                 "GPU-00000000-0000-0000-0000-000000000001"});
  auto id = this_machine_identity(nvml);
  CHECK(id.gpu_uuids.size() == 2);
  CHECK(!id.key.empty());
  nvml::functions none;
  nvml_session absent(none);
  CHECK(nvml_gpu_uuids(absent).empty());
}
