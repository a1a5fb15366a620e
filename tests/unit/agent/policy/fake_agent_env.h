// The agent's machine for its policy tests (agent_env.h): clocks that move
// only when the test moves them, the --progress-file step and the OOM
// killer's count as the test sets them, GPUs from a scripted NVML table
// (fake_nvml_functions.h) or none, and no name lookup.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "agent/policy/agent_env.h"

namespace dtrun::agent::testing {

class fake_agent_env final : public agent_env {
 public:
  // 2023-11-14T22:13:20Z: a wall clock far from zero, as a real one is.
  std::chrono::system_clock::time_point wall =
      std::chrono::system_clock::time_point{} + std::chrono::seconds(1'700'000'000);
  std::chrono::steady_clock::time_point steady{};
  // Both clocks move together, by `d`.
  void advance(std::chrono::milliseconds d) {
    wall += d;
    steady += d;
  }

  // The step each read of --progress-file finds (unset: none, "absent").
  std::function<std::optional<std::int64_t>()> step;
  int step_reads = 0;
  // The OOM killer's count each read finds (unset: no count).
  std::function<std::optional<std::uint64_t>()> oom;
  // The NVML entry points (default: none, so no GPUs).
  nvml::functions gpus{};
  int host_name_checks = 0;

  std::chrono::system_clock::time_point wall_now() override { return wall; }
  std::chrono::steady_clock::time_point steady_now() override { return steady; }
  std::optional<std::int64_t> progress_step(const std::string&, std::string& problem) override {
    ++step_reads;
    auto s = step ? step() : std::nullopt;
    problem = s ? "" : "absent";
    return s;
  }
  std::optional<std::uint64_t> oom_kills() override {
    return oom ? oom() : std::nullopt;
  }
  nvml_session& nvml() override {
    if (!session_) session_.emplace(gpus);
    return *session_;
  }
  void check_host_name(boost::asio::io_context&, std::function<void(std::string)>) override {
    ++host_name_checks;
  }

 private:
  std::optional<nvml_session> session_;
};

}  // namespace dtrun::agent::testing
