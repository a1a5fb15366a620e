#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/devices/gpu_stats.h"

using namespace dtrun::agent;

namespace {

// A fake NVML: two devices; pid 10 on device 0, pid 11 on both.
namespace fake {
int inits = 0, shutdowns = 0;
nvml::return_t init() { ++inits; return nvml::success; }
nvml::return_t failing_init() { return 9; }  // NVML_ERROR_DRIVER_NOT_LOADED
nvml::return_t shutdown() { ++shutdowns; return nvml::success; }
nvml::return_t count(unsigned int* n) { *n = 2; return nvml::success; }
nvml::return_t by_index(unsigned int i, nvml::device_t* d) {
  *d = reinterpret_cast<nvml::device_t>(static_cast<std::uintptr_t>(i + 1));
  return nvml::success;
}
unsigned index_of(nvml::device_t d) { return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(d)) - 1; }
nvml::return_t processes(nvml::device_t d, unsigned int* n, nvml::process_info_t* out) {
  std::vector<nvml::process_info_t> p;
  if (index_of(d) == 0) {
    p = {{10, 1000, 0, 0}, {11, 24, 0, 0}};
  } else {
    p = {{11, 76, 0, 0}, {12, ~0ull, 0, 0}};
  }
  if (*n < p.size()) {
    *n = static_cast<unsigned>(p.size());
    return nvml::error_insufficient_size;
  }
  *n = static_cast<unsigned>(p.size());
  std::copy(p.begin(), p.end(), out);
  return nvml::success;
}
unsigned long long last_since[2] = {0, 0};
nvml::return_t utilization(nvml::device_t d, nvml::process_utilization_sample_t* out,
                           unsigned int* n, unsigned long long since) {
  last_since[index_of(d)] = since;
  std::vector<nvml::process_utilization_sample_t> s;
  if (index_of(d) == 0) {
    s = {{10, 500, 40, 0, 0, 0}, {10, 700, 60, 0, 0, 0}, {11, 600, 5, 0, 0, 0}};
  } else {
    s = {{11, 900, 30, 0, 0, 0}};
  }
  // As NVML: only the samples newer than `since`.
  std::erase_if(s, [since](const auto& sample) { return sample.time_stamp <= since; });
  if (!out || *n < s.size()) {
    *n = static_cast<unsigned>(s.size());
    return nvml::error_insufficient_size;
  }
  *n = static_cast<unsigned>(s.size());
  std::copy(s.begin(), s.end(), out);
  return nvml::success;
}
nvml::return_t rates(nvml::device_t d, nvml::utilization_t* u) {
  u->gpu = index_of(d) == 0 ? 80 : 30;
  u->memory = 10;
  return nvml::success;
}
nvml::return_t memory(nvml::device_t, nvml::memory_t* m) {
  *m = {8000, 6000, 2000};
  return nvml::success;
}
}  // namespace fake

nvml::functions fake_functions() {
  nvml::functions f;
  f.init = fake::init;
  f.shutdown = fake::shutdown;
  f.device_count = fake::count;
  f.device_by_index = fake::by_index;
  f.compute_processes = fake::processes;
  f.process_utilization = fake::utilization;
  f.utilization_rates = fake::rates;
  f.memory_info = fake::memory;
  return f;
}

}  // namespace

TEST_CASE("gpu stats sum memory per pid across devices and keep the highest utilisation") {
  std::vector<std::string> logged;
  {
    nvml_session nvml(fake_functions());
    gpu_stats gpus(nvml, [&](const std::string& l) { logged.push_back(l); });
    REQUIRE(gpus.available());
    auto snap = gpus.sample();
    REQUIRE(snap.devices.size() == 2);
    CHECK(snap.devices[0].utilization_percent == std::optional<unsigned>(80));
    CHECK(snap.devices[1].memory_total == 8000);
    CHECK(snap.processes.at(10).memory_bytes == 1000);
    CHECK(snap.processes.at(10).utilization_percent == std::optional<double>(60));
    CHECK(snap.processes.at(11).memory_bytes == 100);
    CHECK(snap.processes.at(11).utilization_percent == std::optional<double>(30));
    CHECK(snap.processes.at(12).memory_bytes == 0);  // not available: not counted
    // The next sample asks only for what is newer than the last one seen;
    // with nothing newer, each process still on its device keeps its last
    // figure (a second look a moment later reads the same, not idle).
    auto again = gpus.sample();
    CHECK(fake::last_since[0] == 700);
    CHECK(fake::last_since[1] == 900);
    CHECK(again.processes.at(10).utilization_percent == std::optional<double>(60));
    CHECK(again.processes.at(11).utilization_percent == std::optional<double>(30));
    CHECK_FALSE(again.processes.at(12).utilization_percent);  // never sampled

    auto group = gpu_stats::usage_of(snap, {10, 11, 99});
    REQUIRE(group);
    CHECK(group->memory_bytes == 1100);
    CHECK(group->utilization_percent == std::optional<double>(60));
    CHECK(!gpu_stats::usage_of(snap, {99}));
  }
  CHECK(fake::shutdowns == 1);
  CHECK(logged.empty());
}

TEST_CASE("gpu stats whose init fails are unavailable with one debug line") {
  auto f = fake_functions();
  f.init = fake::failing_init;
  std::vector<std::string> logged;
  nvml_session nvml(f);
  gpu_stats gpus(nvml, [&](const std::string& l) { logged.push_back(l); });
  CHECK(!gpus.available());
  CHECK(gpus.sample().devices.empty());
  CHECK(logged.size() == 1);
}

TEST_CASE("gpu stats without the entry points they need are unavailable") {
  nvml::functions none;
  std::vector<std::string> logged;
  nvml_session nvml(none);
  gpu_stats gpus(nvml, [&](const std::string& l) { logged.push_back(l); });
  CHECK(!gpus.available());
  CHECK(logged.size() == 1);
}

TEST_CASE("gpu stats on this machine load NVML or say in one line why not") {
  std::vector<std::string> logged;
  nvml_session nvml;
  gpu_stats gpus(nvml, [&](const std::string& l) { logged.push_back(l); });
  if (!gpus.available()) {
    CHECK(logged.size() == 1);
    CHECK(gpus.sample().processes.empty());
  } else {
    CHECK(logged.empty());
  }
}

// Run on a GPU machine: agent_unit_tests "[gpu]" -s. Skips without NVML.
TEST_CASE("gpu stats read a real GPU", "[gpu]") {
  nvml_session nvml;
  gpu_stats gpus(nvml, [](const std::string& l) { WARN(l); });
  if (!gpus.available()) {
    WARN("NVML not available: skipped");
    return;
  }
  auto snap = gpus.sample();
  CHECK(!snap.devices.empty());
  for (const auto& d : snap.devices) {
    CHECK(d.memory_total > 0);
    WARN("device " << d.index << ": util " << d.utilization_percent.value_or(999) << "% memory "
                   << d.memory_used << "/" << d.memory_total);
  }
  for (const auto& [pid, p] : snap.processes) {
    WARN("pid " << pid << ": " << p.memory_bytes << " bytes, util "
                << (p.utilization_percent ? std::to_string(*p.utilization_percent) : "-"));
  }
}
