// The agent's machine (agent_env.h): the real clocks, files, cgroup, NVML
// and resolver.
#include <optional>
#include <utility>

#include "agent/policy/agent_env.h"
#include "agent/health/host_name_check.h"
#include "agent/process/oom_count.h"
#include "agent/spec/restart_policy.h"

namespace dtrun::agent {
namespace {

class system_env final : public agent_env {
 public:
  std::chrono::system_clock::time_point wall_now() override {
    return std::chrono::system_clock::now();
  }
  std::chrono::steady_clock::time_point steady_now() override {
    return std::chrono::steady_clock::now();
  }
  std::optional<std::int64_t> progress_step(const std::string& file,
                                            std::string& problem) override {
    return read_progress_file(file, problem);
  }
  std::optional<std::uint64_t> oom_kills() override {
    // The agent's cgroup does not change while it runs: found once.
    if (!memory_cgroup_) memory_cgroup_ = memory_cgroup_dir();
    return oom_kill_count(*memory_cgroup_);
  }
  nvml_session& nvml() override {
    // dlopen and nvmlInit once per agent: a machine without the driver
    // only fails the dlopen.
    if (!nvml_) nvml_.emplace();
    return *nvml_;
  }
  void check_host_name(boost::asio::io_context& io,
                       std::function<void(std::string)> warn) override {
    agent::check_host_name(io, std::move(warn));
  }

 private:
  std::optional<std::string> memory_cgroup_;
  std::optional<nvml_session> nvml_;
};

}  // namespace

std::unique_ptr<agent_env> system_agent_env() { return std::make_unique<system_env>(); }

}  // namespace dtrun::agent
