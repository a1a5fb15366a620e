// The real dlopen path (gpu_stats, nvml_session) against the fake
// libnvidia-ml.so.1 of tests/fake_nvml. LD_LIBRARY_PATH reaches the loader
// only when a program starts, so these cases are hidden: CTest's
// agent.fake_nvml_library runs them in a process of their own with the
// library's folder on LD_LIBRARY_PATH and the fake's variables set (see
// tests/unit/agent/CMakeLists.txt).
#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/devices/gpu_reclaim.h"
#include "agent/devices/gpu_stats.h"
#include "agent/health/gpu_health.h"
#include "agent/health/machine_identity.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;

namespace {

std::string fake_nvml_state_path() {
  INFO("run by `ctest -R agent.fake_nvml_library`, which sets LD_LIBRARY_PATH and FAKE_NVML_*");
  const char* path = std::getenv("FAKE_NVML_STATE");
  REQUIRE(path);
  REQUIRE(std::getenv("FAKE_NVML_GPUS"));
  return path;
}

void write_fake_nvml_state(const std::string& text) {
  std::ofstream(fake_nvml_state_path(), std::ios::trunc) << text;
}

}  // namespace

TEST_CASE("fake NVML library: gpu_stats and nvml_session dlopen it", "[.][fake-nvml]") {
  write_fake_nvml_state("process 1 4242 1073741824\n");
  std::vector<std::string> logged;
  nvml_session nvml;
  REQUIRE(nvml.available());
  gpu_stats stats(nvml, [&](const std::string& l) { logged.push_back(l); });
  REQUIRE(stats.available());
  auto snap = stats.sample();
  REQUIRE(snap.devices.size() == 2);
  CHECK(snap.devices[1].memory_used == 1073741824);
  CHECK(snap.processes.at(4242).memory_bytes == 1073741824);
  CHECK(logged.empty());

  auto uuids = nvml_gpu_uuids(nvml);
  REQUIRE(uuids.size() == 2);
  CHECK(uuids[0] == "GPU-fa4e0000-0000-0000-0000-000000000000");
}

TEST_CASE("fake NVML library: the GPU check sees its remap and its XID", "[.][fake-nvml]") {
  write_fake_nvml_state("");
  if (const char* log = std::getenv("FAKE_NVML_LOG")) std::ofstream(log, std::ios::trunc);
  nvml_session nvml;
  REQUIRE(nvml.available());
  gpu_health health(nvml);
  // FAKE_NVML_PENDING_REMAP=1 and FAKE_NVML_XID=0:79 (CMakeLists.txt).
  auto finding = health.check(std::vector<expected_gpu>{{0, "0000:01:00.0"}, {1, ""}}, true);
  CHECK_FALSE(finding.healthy);
  CHECK_THAT(finding.reason, Catch::Contains("GPU 1 has a row remapping pending"));
  CHECK_THAT(finding.reason, Catch::Contains("GPU 0 reported XID 79"));
  CHECK_THAT(health.check(std::vector<expected_gpu>{{2, "0000:03:00.0"}}, true).reason,
             Catch::Contains("GPU 2 (0000:03:00.0) is not visible"));
  CHECK(health.note().empty());
  // An XID written to the state file while the agent runs.
  write_fake_nvml_state("xid 1 48\n");
  CHECK_THAT(health.check_by_index({1}, true).reason, Catch::Contains("GPU 1 reported XID 48"));
  // The event set was only ever drained, never waited on.
  if (const char* log = std::getenv("FAKE_NVML_LOG")) {
    std::ifstream in(log);
    std::string line;
    int waits = 0;
    while (std::getline(in, line)) {
      if (line.rfind("wait ", 0) == 0) {
        ++waits;
        CHECK(line == "wait 0");
      }
    }
    CHECK(waits > 0);
  }
}

TEST_CASE("fake NVML library: the reclaim waiter follows the state file", "[.][fake-nvml]") {
  write_fake_nvml_state("memory 0 0\nmemory 1 0\n");
  nvml_session nvml;
  REQUIRE(nvml.available());
  auto baseline = read_gpu_memory_levels(nvml, {});
  REQUIRE(baseline.size() == 2);
  write_fake_nvml_state("process 1 4242 3221225472\n");
  boost::asio::io_context io;
  boost::asio::steady_timer release(io, 300ms);
  release.async_wait([](const boost::system::error_code&) { write_fake_nvml_state(""); });
  gpu_reclaim_waiter waiter(io, nvml);
  gpu_reclaim_waiter::options opts;
  opts.previous_pids = {4242};
  opts.baseline = baseline;
  opts.timeout = 10s;
  std::optional<gpu_reclaim_waiter::result> result;
  waiter.start(opts, [&](gpu_reclaim_waiter::result r) { result = std::move(r); });
  io.run_for(5s);
  REQUIRE(result);
  CHECK(result->reclaimed);
}
