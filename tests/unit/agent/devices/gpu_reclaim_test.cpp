#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/devices/gpu_reclaim.h"
#include "tests/unit/agent/fake_nvml_functions.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;
namespace scripted_nvml = fake_nvml_functions;

namespace {

constexpr unsigned long long reclaim_gib = 1ull << 30;

nvml::process_info_t gpu_process(unsigned int pid, unsigned long long bytes) {
  return {pid, bytes, 0xffffffffu, 0xffffffffu};
}

}  // namespace

TEST_CASE("gpu reclaim: a previous round's pid still on a GPU is named with its device",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  auto baseline = read_gpu_memory_levels(nvml, {});
  REQUIRE(baseline.size() == 2);
  // 777: not the previous round's
  scripted_nvml::state().gpus[1].processes = {gpu_process(4242, 0), gpu_process(777, 0)};
  auto state = sample_gpu_reclaim(nvml, {0, 1}, {4242, 4243}, baseline, reclaim_gib);
  CHECK_FALSE(state.reclaimed());
  REQUIRE(state.holders.size() == 1);
  CHECK(state.holders[0].device == 1);
  CHECK(state.holders[0].pid == 4242);
  CHECK(state.excess.empty());
  auto reason = describe_unreclaimed(state, 31s, [](pid_t) { return 'D'; });
  CHECK(reason == "GPU 1 still held by pid 4242 (state D) 31 s after the workers were stopped: "
                  "this node leaves the job (check: nvidia-smi; a process in state D needs a "
                  "reboot)");
  // Only the GPUs the node uses are looked at.
  CHECK(sample_gpu_reclaim(nvml, {0}, {4242}, baseline, reclaim_gib).reclaimed());
}

TEST_CASE("gpu reclaim: memory above its level before the job by more than the tolerance",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  auto baseline = read_gpu_memory_levels(nvml, {0, 1});
  scripted_nvml::state().gpus[0].memory_used += 2 * reclaim_gib + reclaim_gib / 10;
  scripted_nvml::state().gpus[1].memory_used += reclaim_gib / 2;  // within the tolerance
  auto state = sample_gpu_reclaim(nvml, {0, 1}, {}, baseline, reclaim_gib);
  CHECK_FALSE(state.reclaimed());
  REQUIRE(state.excess.size() == 1);
  CHECK(state.excess[0].device == 0);
  auto reason = describe_unreclaimed(state, 30s, [](pid_t) { return '?'; });
  CHECK(reason == "GPU 0 memory 2.1 GiB above its level before the job 30 s after the workers "
                  "were stopped: this node leaves the job (check: nvidia-smi)");
}

TEST_CASE("gpu reclaim: no previous pid on the GPUs and memory back is reclaimed",
          "[gpu-health]") {
  nvml_session nvml(scripted_nvml::functions(2));
  auto baseline = read_gpu_memory_levels(nvml, {});
  // Another user's process.
  scripted_nvml::state().gpus[0].processes = {gpu_process(9, reclaim_gib)};
  scripted_nvml::state().gpus[0].memory_used += reclaim_gib / 4;
  CHECK(sample_gpu_reclaim(nvml, {}, {4242}, baseline, reclaim_gib).reclaimed());
  nvml::functions none;
  nvml_session absent(none);
  CHECK(read_gpu_memory_levels(absent, {}).empty());
  CHECK(sample_gpu_reclaim(absent, {0}, {4242}, baseline, reclaim_gib).reclaimed());
}

TEST_CASE("gpu reclaim waiter: times out with the reason", "[gpu-health]") {
  boost::asio::io_context io;
  nvml_session nvml(scripted_nvml::functions(1));
  scripted_nvml::state().gpus[0].processes = {gpu_process(4242, reclaim_gib)};
  gpu_reclaim_waiter waiter(io, nvml);
  gpu_reclaim_waiter::options opts;
  opts.previous_pids = {4242};
  opts.baseline = {{0, 500ull << 20}};
  opts.timeout = 300ms;
  opts.interval = 50ms;
  opts.state_of = [](pid_t) { return 'D'; };
  std::optional<gpu_reclaim_waiter::result> result;
  auto start = std::chrono::steady_clock::now();
  waiter.start(opts, [&](gpu_reclaim_waiter::result r) { result = std::move(r); });
  CHECK_FALSE(result);  // never from inside start()
  io.run_for(5s);
  REQUIRE(result);
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  CHECK_FALSE(result->reclaimed);
  CHECK_THAT(result->reason,
             Catch::StartsWith("GPU 0 still held by pid 4242 (state D) 0 s after"));
  CHECK_THAT(result->reason, Catch::Contains("this node leaves the job"));
  REQUIRE(result->last.holders.size() == 1);
}

TEST_CASE("gpu reclaim waiter: done as soon as a look is clean", "[gpu-health]") {
  boost::asio::io_context io;
  nvml_session nvml(scripted_nvml::functions(2));
  auto baseline = read_gpu_memory_levels(nvml, {});
  scripted_nvml::state().gpus[1].processes = {gpu_process(4242, reclaim_gib)};
  scripted_nvml::state().gpus[1].memory_used += 3 * reclaim_gib;
  // The stopped worker leaves the GPU 250 ms in, its memory freed with it.
  boost::asio::steady_timer release(io, 250ms);
  release.async_wait([](const boost::system::error_code&) {
    scripted_nvml::state().gpus[1].processes.clear();
    scripted_nvml::state().gpus[1].memory_used -= 3 * reclaim_gib;
  });
  gpu_reclaim_waiter waiter(io, nvml);
  gpu_reclaim_waiter::options opts;
  opts.devices = {0, 1};
  opts.previous_pids = {4242};
  opts.baseline = baseline;
  opts.timeout = 10s;
  std::optional<gpu_reclaim_waiter::result> result;
  auto start = std::chrono::steady_clock::now();
  waiter.start(opts, [&](gpu_reclaim_waiter::result r) { result = std::move(r); });
  io.run_for(5s);
  auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(result);
  CHECK(result->reclaimed);
  CHECK(result->reason.empty());
  CHECK(took >= 250ms);
  CHECK(took < 2s);
}

TEST_CASE("gpu reclaim waiter: without a driver at once; a cancelled wait never calls done",
          "[gpu-health]") {
  boost::asio::io_context io;
  nvml::functions none;
  nvml_session absent(none);
  gpu_reclaim_waiter waiter(io, absent);
  std::optional<gpu_reclaim_waiter::result> result;
  waiter.start({}, [&](gpu_reclaim_waiter::result r) { result = std::move(r); });
  io.run_for(1s);
  REQUIRE(result);
  CHECK(result->reclaimed);

  nvml_session nvml(scripted_nvml::functions(1));
  scripted_nvml::state().gpus[0].processes = {gpu_process(4242, reclaim_gib)};
  gpu_reclaim_waiter held(io, nvml);
  gpu_reclaim_waiter::options opts;
  opts.previous_pids = {4242};
  opts.timeout = 200ms;
  bool called = false;
  held.start(opts, [&](gpu_reclaim_waiter::result) { called = true; });
  held.cancel();
  io.restart();
  io.run_for(500ms);
  CHECK_FALSE(called);
}
