// The real node_health_checker (node_health.h): the built-in checks (the
// node's GPUs through NVML, free space under the run's folder, the
// rendezvous endpoint resolving, the network links, --storage-check's
// paths) and --node-health-check's command, one after the other, gathered
// into one verdict.
//
// The first check (before joining) runs everything; later ones (while the
// workers run) run the GPU, disk and endpoint built-ins only when they
// keep the node out (--node-health-check=builtin): a warning is said
// once, not every interval. The links and the storage paths are watched
// at every check, gating or not (a counter that rose, a mount that hangs
// mid-job are news only then); a problem that lasts is marked `repeated`
// after its first report. Single-threaded, on the agent's event loop.
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
#include "agent/health/nic_health.h"
#include "agent/health/node_health.h"
#include "agent/health/storage_probe.h"
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
  void resolve_endpoint(health_verdict verdict, bool with_builtins);
  void check_links(health_verdict verdict);
  void probe_storage(health_verdict verdict);
  void run_command(health_verdict verdict);
  void finish(health_verdict verdict);

  boost::asio::io_context& io_;
  node_health_options options_;
  std::string folder_;
  std::vector<expected_gpu> gpus_;
  std::optional<gpu_health> gpu_;
  endpoint_check endpoint_;
  env_map env_;  // the workers': which interfaces and HCAs NCCL and gloo use
  // The interfaces watched, found at the first check (the route to the
  // endpoint needs its address); nullopt until then.
  std::optional<std::vector<std::string>> interfaces_;
  nic_health nic_;
  std::optional<storage_probe> storage_;
  std::optional<health_command> command_;
  std::function<void(const std::string&)> debug_;  // the agent's -v log
  std::function<void(health_verdict)> done_;
  bool first_ = true;
  std::uint64_t generation_ = 0;  // a posted check() of before a cancel() does nothing
};

}  // namespace dtrun::agent
