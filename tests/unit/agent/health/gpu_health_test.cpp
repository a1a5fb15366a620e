#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/health/gpu_health.h"
#include "tests/unit/agent/fake_nvml_functions.h"

using namespace dtrun::agent;
namespace scripted_nvml = fake_nvml_functions;

TEST_CASE("gpu health: healthy GPUs pass, registered for XIDs, never waiting", "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  {
    gpu_health health(nvml);
    CHECK(scripted_nvml::state().registered == 2);
    auto finding = health.check_by_index({0, 1}, true);
    CHECK(finding.check == "gpu");
    CHECK(finding.healthy);
    CHECK(finding.gating);
    CHECK(finding.reason.empty());
    CHECK(health.note().empty());
    CHECK_FALSE(health.check_by_index({0}, false).gating);
    CHECK(scripted_nvml::state().waits_with_timeout == 0);
  }
  CHECK(scripted_nvml::state().event_set_freed);
}

TEST_CASE("gpu health: a pending row remapping on device 1 names it and the command",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  gpu_health health(nvml);
  scripted_nvml::state().gpus[1].remap_pending = 1;
  auto finding = health.check_by_index({0, 1}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 1 has a row remapping pending"));
  CHECK_THAT(finding.reason, Catch::Contains("nvidia-smi -q -d ROW_REMAPPER -i 1"));
  CHECK_THAT(finding.reason, !Catch::Contains("GPU 0"));
  // A GPU the node does not use is not judged.
  CHECK(health.check_by_index({0}, true).healthy);
}

TEST_CASE("gpu health: a failed row remapping keeps the node out", "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(1));
  gpu_health health(nvml);
  scripted_nvml::state().gpus[0].remap_failure = 1;
  auto finding = health.check_by_index({0}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 0 failed to remap a memory row"));
  CHECK_THAT(finding.reason, Catch::Contains("ROW_REMAPPER"));
}

TEST_CASE("gpu health: before A100, pending retired pages count instead of rows",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  gpu_health health(nvml);
  for (auto& g : scripted_nvml::state().gpus) g.architecture = 5;  // Volta
  scripted_nvml::state().gpus[0].remap_pending = 1;  // not asked on a Volta
  CHECK(health.check_by_index({0, 1}, true).healthy);
  scripted_nvml::state().gpus[1].pages_pending = nvml::feature_enabled;
  auto finding = health.check_by_index({0, 1}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 1 has retired memory pages pending"));
  CHECK_THAT(finding.reason, Catch::Contains("nvidia-smi -q -d PAGE_RETIREMENT -i 1"));
}

TEST_CASE("gpu health: a GPU that does not remap rows is judged by its retired pages",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(1));
  gpu_health health(nvml);
  scripted_nvml::state().gpus[0].remap_rc = nvml::error_not_supported;
  CHECK(health.check_by_index({0}, true).healthy);
  scripted_nvml::state().gpus[0].pages_pending = nvml::feature_enabled;
  CHECK_THAT(health.check_by_index({0}, true).reason, Catch::Contains("PAGE_RETIREMENT"));
}

TEST_CASE("gpu health: an XID since registration names the XID and the device",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  gpu_health health(nvml);
  scripted_nvml::state().events.push_back(scripted_nvml::xid_event(1, 79));
  auto finding = health.check_by_index({0, 1}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 1 reported XID 79"));
  CHECK_THAT(finding.reason, Catch::Contains("dmesg | grep -i xid"));
  // Once seen, it stays: the event is gone from NVML's queue.
  CHECK_FALSE(health.check_by_index({1}, true).healthy);
  CHECK(health.check_by_index({0}, true).healthy);
}

TEST_CASE("gpu health: XIDs an application causes do not make the node bad", "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(1));
  gpu_health health(nvml);
  for (unsigned long long xid : {13, 31, 43, 45}) {
    scripted_nvml::state().events.push_back(scripted_nvml::xid_event(0, xid));
  }
  CHECK(health.check_by_index({0}, true).healthy);
  CHECK(xid_is_application_error(45));
  CHECK_FALSE(xid_is_application_error(79));
  CHECK_FALSE(xid_is_application_error(48));
}

TEST_CASE("gpu health: missing optional entry points skip their checks with a note",
          "[gpu-health]") {
  auto f = scripted_nvml::functions(1);
  f.remapped_rows = nullptr;
  f.event_set_wait = nullptr;
  nvml_session nvml(f);
  gpu_health health(nvml);
  scripted_nvml::state().gpus[0].remap_pending = 1;
  scripted_nvml::state().events.push_back(scripted_nvml::xid_event(0, 79));
  auto finding = health.check_by_index({0}, true);
  CHECK(finding.healthy);
  CHECK(finding.reason.empty());
  CHECK_THAT(health.note(), Catch::Contains("nvmlDeviceGetRemappedRows"));
  CHECK_THAT(health.note(), Catch::Contains("XIDs not watched"));
  CHECK(scripted_nvml::state().registered == 0);
}

TEST_CASE("gpu health: a GPU the node expects but NVML does not see", "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  gpu_health health(nvml);
  auto finding = health.check_by_index({0, 1, 2, 3}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 2 is not visible: NVML sees 2 GPUs"));
  CHECK_THAT(finding.reason, Catch::Contains("GPU 3 is not visible"));
  CHECK_THAT(finding.reason, Catch::Contains("nvidia-smi -L"));
  CHECK(finding.reason.find('\n') == std::string::npos);
}

TEST_CASE("gpu health without a driver: healthy, with a note", "[gpu-health]") {
  nvml::functions none;
  nvml_session nvml(none);
  REQUIRE_FALSE(nvml.available());
  gpu_health health(nvml);
  auto finding = health.check_by_index({0, 1}, true);
  CHECK(finding.healthy);
  CHECK(finding.reason.empty());
  CHECK(health.note() == "no NVIDIA driver: GPU checks skipped");
}

TEST_CASE("gpu health: a GPU fallen off the bus is named by its address, not a shifted index",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(3));
  gpu_health health(nvml);
  std::vector<expected_gpu> gpus = {
      {0, "0000:01:00.0"}, {1, "0000:02:00.0"}, {2, "0000:03:00.0"}};
  CHECK(health.check(gpus, true).healthy);
  // GPU 1 is gone: NVML now numbers the third GPU 1.
  scripted_nvml::state().gpus.erase(scripted_nvml::state().gpus.begin() + 1);
  auto finding = health.check(gpus, true);
  CHECK_FALSE(finding.healthy);
  CHECK(finding.reason == "GPU 1 (0000:02:00.0) is not visible: NVML cannot find it (code 6; "
                          "check: nvidia-smi -L)");
}

TEST_CASE("gpu health: expected GPUs from the accelerator inventory", "[gpu-health]") {
  accelerator a;
  a.physical_index = 3;
  a.pci_address = "0000:3b:00.0";
  auto gpus = expected_gpus({a});
  REQUIRE(gpus.size() == 1);
  CHECK(gpus[0].index == 3);
  CHECK(gpus[0].pci_address == "0000:3b:00.0");
}
