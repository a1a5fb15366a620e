#include "agent/health/node_health_checks.h"

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "agent/devices/accelerators.h"
#include "agent/health/disk_space_check.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

// The endpoint's name resolves within this or the check fails: a
// resolver that hangs longer would hang the rendezvous too.
constexpr std::chrono::seconds endpoint_timeout{10};

// The nearest folder that exists (--log-dir may be created later).
std::string existing_folder(std::string folder) {
  std::error_code ec;
  fs::path p = folder.empty() ? fs::temp_directory_path(ec) : fs::path(folder);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.empty() ? std::string(".") : p.string();
}

// "HOST.PID": the storage probe's file is this agent's own, on a file
// system other nodes share.
std::string probe_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    return std::to_string(::getpid());
  }
  std::string tag = host;
  for (char& c : tag) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  return tag + "." + std::to_string(::getpid());
}

}  // namespace

node_health_checks::node_health_checks(boost::asio::io_context& io,
                                       const node_health_options& options, std::string folder,
                                       const env_map& env, nvml_session& nvml,
                                       process_runner& runner, worker_group& exits,
                                       std::function<void(const std::string&)> debug)
    : io_(io), options_(options), folder_(std::move(folder)), endpoint_(io), env_(env),
      debug_(std::move(debug)) {
  if (nvml.available()) {
    gpus_ = expected_gpus(visible_gpus("/", env));
    // NVML sees GPUs the driver's /proc list does not show (a container
    // without it): then CUDA_VISIBLE_DEVICES over NVML's list, by torch's
    // rule, as over the driver's.
    if (gpus_.empty()) {
      auto named = env.find("CUDA_VISIBLE_DEVICES");
      gpus_ = expected_gpus(apply_visible_devices(
          named == env.end() ? std::nullopt : std::optional<std::string>(named->second),
          nvml_gpus(nvml)));
    }
    gpu_.emplace(nvml);
    if (!gpu_->note().empty() && debug_) debug_(gpu_->note());
  } else if (debug_) {
    debug_(fmt::format("GPU health checks skipped: {}", nvml.why_unavailable()));
  }
  if (!options_.storage_paths.empty()) {
    storage_probe_options o;
    o.paths = options_.storage_paths;
    o.deadline = options_.timeout;
    o.tag = probe_tag();
    storage_.emplace(io, runner, exits, std::move(o));
  }
  if (!options_.command.empty()) {
    health_command_options o;
    o.command = options_.command;
    o.timeout = options_.timeout;
    o.env = env;
    command_.emplace(io, runner, exits, std::move(o));
  }
}

// Posted: `done` is never called from inside check().
void node_health_checks::check(std::function<void(health_verdict)> done) {
  done_ = std::move(done);
  bool with_builtins = first_ || options_.builtin_gating;
  first_ = false;
  boost::asio::post(io_, [this, with_builtins, generation = ++generation_] {
    if (generation != generation_ || !done_) return;  // cancelled meanwhile
    health_verdict verdict;
    if (with_builtins) builtins(verdict);
    resolve_endpoint(std::move(verdict), with_builtins);
  });
}

// The quick ones, at once: statvfs and a few NVML calls.
void node_health_checks::builtins(health_verdict& verdict) {
  bool gating = options_.builtin_gating;
  verdict.findings.push_back(
      check_disk_space(existing_folder(folder_), options_.min_free_disk, gating));
  if (gpu_) verdict.findings.push_back(gpu_->check(gpus_, gating));
}

// Its finding only when it may keep the node out: the rendezvous already
// warns, at once, of an endpoint that does not resolve (store_host.cpp).
// Resolved once besides, for the route to it (the links' check).
void node_health_checks::resolve_endpoint(health_verdict verdict, bool with_builtins) {
  bool judged = with_builtins && options_.builtin_gating;
  bool for_route = !interfaces_;
  if (options_.endpoint_host.empty() || !(judged || for_route)) {
    return check_links(std::move(verdict));
  }
  endpoint_.run(options_.endpoint_host, endpoint_timeout, options_.builtin_gating,
                [this, judged, verdict = std::move(verdict)](health_finding f) mutable {
                  if (judged) verdict.findings.push_back(std::move(f));
                  check_links(std::move(verdict));
                });
}

// sysfs: quick, on the loop.
void node_health_checks::check_links(health_verdict verdict) {
  bool first = !interfaces_;
  if (first) {
    std::string routed = endpoint_.address().empty() ? std::string()
                                                     : route_interface(endpoint_.address());
    if (routed == "lo") routed.clear();  // one machine: no link to watch
    interfaces_ = socket_interfaces(options_.sysfs_root, env_, routed);
  }
  auto hca = env_.find("NCCL_IB_HCA");
  auto now = read_nic_snapshot(options_.sysfs_root, hca == env_.end() ? "" : hca->second,
                               *interfaces_);
  // A check with nothing to judge passes every node: said once.
  if (first && now.ports.empty() && now.links.empty() && debug_) {
    debug_("network link checks: nothing to watch (no InfiniBand or RoCE port in sysfs, and no "
           "socket interface: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME unset, and the "
           "rendezvous endpoint is this machine)");
  }
  for (auto& f : nic_.judge(now, options_.builtin_gating)) verdict.findings.push_back(std::move(f));
  probe_storage(std::move(verdict));
}

void node_health_checks::probe_storage(health_verdict verdict) {
  if (!storage_) return run_command(std::move(verdict));
  storage_->run(options_.builtin_gating,
                [this, verdict = std::move(verdict)](std::vector<health_finding> found) mutable {
                  for (auto& f : found) verdict.findings.push_back(std::move(f));
                  run_command(std::move(verdict));
                });
}

void node_health_checks::run_command(health_verdict verdict) {
  if (!command_) return finish(std::move(verdict));
  command_->run([this, verdict = std::move(verdict)](health_finding f) mutable {
    verdict.findings.push_back(std::move(f));
    finish(std::move(verdict));
  });
}

void node_health_checks::finish(health_verdict verdict) {
  auto done = std::exchange(done_, nullptr);
  if (done) done(std::move(verdict));
}

void node_health_checks::cancel() {
  done_ = nullptr;
  ++generation_;
  endpoint_.cancel();
  if (storage_) storage_->cancel();
  if (command_) command_->cancel();
}

}  // namespace dtrun::agent
