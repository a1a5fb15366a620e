// The resolved configuration as JSON (dtrun --dry-run): what it says,
// nothing recomputed beside it.
#include "launcher/config/launch_config.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/devices/cpu_list.h"
#include "agent/spec/exit_status.h"
#include "agent/spec/section_timeouts.h"
#include "launcher/config/log_options.h"

namespace dtrun::launcher {
namespace {

nlohmann::json to_json(const rendezvous::store_access_options& a) {
  nlohmann::json networks = nlohmann::json::array();
  for (const auto& n : a.allowed_networks) networks.push_back(n.text);
  return {{"same_user_only", a.same_user_only}, {"allowed_networks", networks}};
}

nlohmann::json to_json(const std::vector<derived_setting>& settings) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : settings) {
    a.push_back({{"setting", d.setting}, {"value", d.value}, {"source", d.source}});
  }
  return a;
}

// The store this node hosts or joins: on loopback, or the multi-node
// rendezvous' endpoint (an etcd cluster's first member).
// What keeps this node out, and when the checks run.
// --no-restart-on's rules as the user wrote them (validated).
nlohmann::json no_restart_json(const std::vector<agent::no_restart_rule>& rules) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rules) out.push_back(r.text);
  return out;
}

nlohmann::json preflight_json(const agent::preflight_options& p) {
  if (p.mode == agent::preflight_mode::off) return nullptr;
  return {{"mode", agent::preflight_mode_name(p.mode)},
          {"action", agent::preflight_action_name(p.action)},
          {"timeout_s", static_cast<double>(p.timeout.count()) / 1000.0}};
}

nlohmann::json stragglers_json(const agent::straggler_options& s) {
  return {{"action", agent::preflight_action_name(s.action)},
          {"worker_timing", s.worker_timing}};
}

nlohmann::json node_health_json(const agent::node_health_options& h) {
  return {{"command", h.command.empty() ? nlohmann::json() : nlohmann::json(h.command)},
          {"builtin", h.builtin_gating ? "gating" : "warn"},
          // Every check after the first: the links and storage paths are
          // watched whether or not anything gates.
          {"interval_s", static_cast<double>(h.interval.count()) / 1000.0},
          {"timeout_s", static_cast<double>(h.timeout.count()) / 1000.0},
          {"storage_check", h.storage_paths}};
}

std::string rdzv_endpoint(const launch_config& c) {
  if (const auto* m = c.multi_node()) {
    return fmt::format("{}:{}", m->rendezvous.endpoint_host, m->rendezvous.endpoint_port);
  }
  return fmt::format("{}:{}", c.single_node()->store_host, c.single_node()->store_port);
}

const rendezvous::store_access_options& store_access(const launch_config& c) {
  if (const auto* m = c.multi_node()) return m->rendezvous.store_access;
  return c.single_node()->store_access;
}

// The node's group rank and the node count, where the configuration fixes
// both (a single node; a static rank or a pinned one with a fixed --nnodes).
std::optional<std::pair<int, int>> known_group(const launch_config& c) {
  if (!c.multi_node()) return std::pair{0, 1};
  int group_rank = c.multi_node()->rendezvous.fixed_rank;
  if (group_rank < 0 || c.nnodes.min != c.nnodes.max) return std::nullopt;
  return std::pair{group_rank, c.nnodes.max};
}

// One local rank's environment, CPUs and (where it differs from the
// group's) argv, as far as they are known before rendezvous.
nlohmann::json worker_json(const launch_config& c, int local_rank, const env_map& agent_env) {
  nlohmann::json w = {{"local_rank", local_rank},
                      {"env", agent::static_worker_env(c.agent.spec, local_rank, agent_env)}};
  if (static_cast<std::size_t>(local_rank) < c.agent.worker_cpus.size()) {
    w["cpus"] = agent::format_cpu_list(c.agent.worker_cpus[static_cast<std::size_t>(local_rank)]);
  }
  auto& env = w["env"];
  if (auto group = known_group(c)) {
    env["RANK"] = std::to_string(group->first * c.nproc_per_node() + local_rank);
    env["WORLD_SIZE"] = std::to_string(group->second * c.nproc_per_node());
    env["GROUP_RANK"] = std::to_string(group->first);
  }
  for (const auto& [k, v] : c.agent.worker_args.env_overrides) env[k] = v;
  if (c.agent.worker_args.changes_args() || c.agent.worker_args.virtual_local_rank ||
      agent::has_local_rank_macro(c.agent.args)) {
    // This worker's own argv (${local_rank}, --local-rank, placeholders)
    // and virtual local rank, as far as known.
    env_map known;
    for (const auto& [k, v] : env.items()) known[k] = v.get<std::string>();
    std::vector<std::string> args = c.agent.args;
    agent::customize_worker(c.agent.worker_args, args, known);
    for (const auto& [k, v] : known) env[k] = v;
    nlohmann::json argv = nlohmann::json::array({c.program});
    for (const auto& a : args) argv.push_back(a);
    w["argv"] = argv;
  }
  return w;
}

}  // namespace

nlohmann::json to_json(const launch_config& c, const env_map& env) {
  nlohmann::json workers = nlohmann::json::array();
  for (int local_rank = 0; local_rank < c.nproc_per_node(); ++local_rank) {
    workers.push_back(worker_json(c, local_rank, env));
  }
  nlohmann::json signals = nlohmann::json::array();
  for (int sig : c.agent.signals) signals.push_back(agent::signal_name(sig));
  nlohmann::json argv =
      nlohmann::json::array({c.agent.program.empty() ? c.program : c.agent.program});
  for (const auto& a : c.agent.args) argv.push_back(a);
  nlohmann::json out = {
      {"nnodes", {{"min", c.nnodes.min}, {"max", c.nnodes.max}}},
      {"nproc_per_node", c.nproc_per_node()},
      {"standalone", c.single_node() != nullptr},
      {"rdzv_endpoint", rdzv_endpoint(c)},
      {"run_id", c.agent.spec.run_id},
      {"role", c.agent.spec.role},
      {"max_restarts", c.agent.spec.max_restarts},
      {"no_restart_on", no_restart_json(c.agent.no_restart_on)},
      {"progress_file", c.agent.progress_file.empty() ? nlohmann::json()
                                                      : nlohmann::json(c.agent.progress_file)},
      {"max_no_progress_restarts", c.agent.max_no_progress_restarts},
      {"stop_timeout_s", static_cast<double>(c.agent.stop_timeout.count()) / 1000.0},
      {"signals_to_handle", signals},
      {"checkpoint_signal", c.agent.checkpoint_signal != 0
                                ? nlohmann::json(agent::signal_name(c.agent.checkpoint_signal))
                                : nlohmann::json(nullptr)},
      {"preempt_notice", c.agent.preempt_notice != 0
                             ? nlohmann::json(agent::signal_name(c.agent.preempt_notice))
                             : nlohmann::json(nullptr)},
      {"hang_timeout_s", static_cast<double>(c.agent.hang_timeout.count()) / 1000.0},
      {"section_timeouts", c.agent.section_timeouts.empty()
                               ? nlohmann::json()
                               : nlohmann::json(agent::to_text(c.agent.section_timeouts))},
      {"node_health_check", node_health_json(c.agent.health)},
      {"gpu_reclaim_timeout_s", static_cast<double>(c.agent.gpu_reclaim_timeout.count()) / 1000.0},
      {"quarantine", c.agent.quarantine.enabled()
                         ? nlohmann::json{{"after", c.agent.quarantine.after},
                                          {"cooldown_s", static_cast<double>(
                                                             c.agent.quarantine.cooldown.count()) /
                                                             1000.0},
                                          {"file", c.agent.quarantine.file}}
                         : nlohmann::json()},
      {"preflight", preflight_json(c.agent.preflight)},
      {"stragglers", stragglers_json(c.agent.stragglers)},
      {"stack_hook", c.agent.stack_hook},
      {"interpreter", c.agent.interpreter.empty() ? nlohmann::json() : nlohmann::json(c.agent.interpreter)},
      {"stop_on_stdin_eof", c.agent.stop_on_stdin_eof},
      {"preload", c.agent.preload},
      {"metrics", c.agent.metrics_port < 0 ? nlohmann::json()
                                     : nlohmann::json(fmt::format("{}:{}", c.agent.metrics_host,
                                                                  c.agent.metrics_port))},
      {"use_agent_store", c.agent.spec.use_agent_store},
      {"store_access", to_json(store_access(c))},
      {"log_dir", c.agent.log_dir},
      {"logs", to_json(c.agent.logs, c.nproc_per_node())},
      {"event_log", c.agent.report.event_log},
      {"verbosity", c.agent.report.level == agent::verbosity::quiet     ? "quiet"
                    : c.agent.report.level == agent::verbosity::verbose ? "verbose"
                                                                  : "normal"},
      {"argv", argv},
      {"workers", workers},
  };
  if (c.multi_node()) out["rendezvous"] = to_json(*c.multi_node());
  out["scheduler"] = c.scheduler.scheduler.empty() ? nlohmann::json(nullptr)
                                                   : nlohmann::json(c.scheduler.scheduler);
  if (!c.scheduler.style.empty()) out["scheduler_style"] = c.scheduler.style;
  out["derived"] = to_json(c.scheduler.derived);
  out["from_pet_env"] = to_json(c.scheduler.from_pet);
  out["numa_binding"] = c.numa_binding.empty() ? nlohmann::json() : nlohmann::json(c.numa_binding);
  return out;
}

}  // namespace dtrun::launcher
