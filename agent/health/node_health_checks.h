// The real node_health_checker (node_health.h): the built-in checks (the
// node's GPUs through NVML, free space under the run's folder, the
// rendezvous endpoint resolving) and --node-health-check's command, one
// after the other, gathered into one verdict.
//
// The first check (before joining) runs everything; later ones (while the
// workers run) run the built-ins only when they keep the node out
// (--node-health-check=builtin): a warning is said once, not every
// interval. Single-threaded, on the agent's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "agent/devices/nvml_api.h"
#include "agent/health/endpoint_check.h"
#include "agent/health/gpu_health.h"
#include "agent/health/health_command.h"
#include "agent/health/node_health.h"
#include "agent/spec/agent_options.h"

namespace dtrun::agent {

class node_health_checks final : public node_health_checker {
 public:
  // `folder`: where the run writes (its free space is checked); `env`:
  // the workers' environment (which GPUs they see, the command's
  // environment). `nvml`, `runner` and `exits` must outlive this object.
  node_health_checks(boost::asio::io_context& io, const node_health_options& options,
                     std::string folder, const env_map& env, nvml_session& nvml,
                     process_runner& runner, worker_group& exits,
                     std::function<void(const std::string&)> debug);

  void check(std::function<void(health_verdict)> done) override;
  void cancel() override;

 private:
  void builtins(health_verdict& verdict);
  void resolve_endpoint(health_verdict verdict);
  void run_command(health_verdict verdict);
  void finish(health_verdict verdict);

  boost::asio::io_context& io_;
  node_health_options options_;
  std::string folder_;
  std::vector<expected_gpu> gpus_;
  std::optional<gpu_health> gpu_;
  endpoint_check endpoint_;
  std::optional<health_command> command_;
  std::function<void(health_verdict)> done_;
  bool first_ = true;
  std::uint64_t generation_ = 0;  // a posted check() of before a cancel() does nothing
};

}  // namespace dtrun::agent
