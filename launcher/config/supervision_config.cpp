#include "launcher/config/supervision_config.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "agent/spec/exit_status.h"
#include "agent/spec/section_timeouts.h"
#include "launcher/config/torch_plugins.h"
#include "rendezvous/base/number_parse.h"

namespace dtrun::launcher {
namespace {

// --storage-check: absolute paths (the probe runs in the agent's folder
// too, but a message should name the path whole), made so without touching
// the file system: a hung mount must not hang the launch.
std::vector<std::string> storage_paths(const std::string& list) {
  std::vector<std::string> paths;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) {
      throw usage_error("--storage-check: an empty path in '" + list +
                        "'; give folders separated by single commas");
    }
    std::error_code ec;
    auto whole = std::filesystem::absolute(item, ec);
    paths.push_back(ec ? item : whole.lexically_normal().string());
  }
  return paths;
}

// --node-health-check: each value "builtin" or the one command.
void resolve_health(const launch_options& o, launch_config& c) {
  agent::node_health_options& h = c.agent.health;
  for (const auto& value : o.node_health_check) {
    if (value == "builtin") {
      h.builtin_gating = true;
    } else if (value.find_first_not_of(" \t") == std::string::npos) {
      throw usage_error("--node-health-check: the command is empty; give a command that exits "
                        "0 on a healthy node, or 'builtin'");
    } else if (!h.command.empty()) {
      throw usage_error("--node-health-check: two commands given; join them in one (e.g. "
                        "'check-a && check-b'), the other value may be 'builtin'");
    } else {
      h.command = value;
    }
  }
  h.interval = seconds_to_duration(o.node_health_check_interval, "--node-health-check-interval",
                                   {true, max_duration_s});
  h.timeout = seconds_to_duration(o.node_health_check_timeout, "--node-health-check-timeout",
                                  {false, max_duration_s});
  if (h.timeout.count() == 0) h.timeout = std::chrono::milliseconds(1);
  if (const auto* multi = c.multi_node()) h.endpoint_host = multi->rendezvous.endpoint_host;
  h.storage_paths = storage_paths(o.storage_check);
  c.agent.gpu_reclaim_timeout = seconds_to_duration(o.gpu_reclaim_timeout,
                                                    "--gpu-reclaim-timeout",
                                                    {true, max_duration_s});
  agent::quarantine_options& q = c.agent.quarantine;
  if (o.quarantine_after < 0 || o.quarantine_after > 1000) {
    throw usage_error(fmt::format("--quarantine-after: '{}' is not a whole number from 0 to 1000",
                                  o.quarantine_after));
  }
  q.after = o.quarantine_after;
  q.cooldown = seconds_to_duration(o.quarantine_cooldown, "--quarantine-cooldown",
                                   {false, max_duration_s});
  if (q.cooldown.count() == 0) q.cooldown = std::chrono::milliseconds(1);
  q.longest = std::max(q.cooldown, std::chrono::milliseconds(std::chrono::hours(1)));
  q.file = o.quarantine_file;
  if (!q.file.empty() && !q.enabled()) {
    c.warnings.push_back("--quarantine-file has no effect without --quarantine-after");
  }
}

// --preflight, --preflight-action and --preflight-timeout (docs/agent.md,
// "Preflight"); the values were checked by the command line's parse.
void resolve_preflight(const launch_options& o, launch_config& c) {
  agent::preflight_options& p = c.agent.preflight;
  for (auto mode : {agent::preflight_mode::once, agent::preflight_mode::every_round}) {
    if (o.preflight == agent::preflight_mode_name(mode)) p.mode = mode;
  }
  for (auto action : {agent::preflight_action::leave, agent::preflight_action::quarantine}) {
    if (o.preflight_action == agent::preflight_action_name(action)) p.action = action;
  }
  p.timeout = seconds_to_duration(o.preflight_timeout, "--preflight-timeout",
                                  {false, max_duration_s});
  if (p.timeout.count() == 0) p.timeout = std::chrono::milliseconds(1);
  if (p.mode == agent::preflight_mode::off && o.preflight_action != "warn") {
    c.warnings.push_back("--preflight-action has no effect without --preflight");
  }
  agent::straggler_options& s = c.agent.stragglers;
  for (auto action : {agent::preflight_action::leave, agent::preflight_action::quarantine}) {
    if (o.straggler_action == agent::preflight_action_name(action)) s.action = action;
  }
  s.worker_timing = o.worker_timing != "off";
  if (!s.worker_timing && o.straggler_action != "warn") {
    c.warnings.push_back("--straggler-action has no effect with --worker-timing=off (nothing is "
                         "timed, so no straggler is named)");
  }
}

// --checkpoint-signal and --preempt-notice (docs/agent.md, "Preemption"):
// signals a process can catch, each for its one job.
void resolve_preemption(const launch_options& o, agent::agent_options& a) {
  auto parse = [](const std::string& flag, const std::string& name) {
    int sig = agent::parse_signal(name);
    if (sig == 0) {
      throw usage_error(fmt::format("{}: '{}' is not a signal; name one like SIGUSR1", flag, name));
    }
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGCONT) {
      throw usage_error(fmt::format("{}: {} cannot be caught or means something else; name a "
                                    "signal like SIGUSR1",
                                    flag, agent::signal_name(sig)));
    }
    if (sig == SIGTERM || sig == SIGINT) {
      throw usage_error(fmt::format("{}: {} already stops the workers; name a signal of its "
                                    "own, like SIGUSR1",
                                    flag, agent::signal_name(sig)));
    }
    return sig;
  };
  if (!o.checkpoint_signal.empty()) {
    a.checkpoint_signal = parse("--checkpoint-signal", o.checkpoint_signal);
  }
  if (o.preempt_notice.empty()) return;
  if (a.checkpoint_signal == 0) {
    throw usage_error("--preempt-notice needs --checkpoint-signal, the signal the workers get "
                      "(e.g. --preempt-notice=SIGUSR1 --checkpoint-signal=SIGUSR1)");
  }
  a.preempt_notice = parse("--preempt-notice", o.preempt_notice);
  // The agent must catch it (it is the agent's, not forwarded as such).
  if (std::find(a.signals.begin(), a.signals.end(), a.preempt_notice) == a.signals.end()) {
    a.signals.push_back(a.preempt_notice);
  }
}

}  // namespace

// How the agent supervises the workers and reports: the worker group,
// restarts, timeouts, the stack hook, metrics, signals, verbosity.
void resolve_supervision(const launch_options& o, const scheduler_env& sched, launch_config& c) {
  agent::agent_options& a = c.agent;
  a.spec.role = o.role;
  a.spec.max_restarts = o.max_restarts;
  a.spec.use_agent_store = !c.multi_node() || c.multi_node()->rendezvous.workers_use_agent_store;
  a.stop_on_stdin_eof = o.stop_on_stdin_eof;  // dtrun --hosts' agents
  // Checked again here: options may come from elsewhere than the command
  // line (tests, scheduler detection), and a NaN would become any duration.
  a.stop_timeout = seconds_to_duration(o.stop_timeout, "--stop-timeout", {true, max_duration_s});
  if (o.max_restarts < 0 || o.max_restarts > max_restarts_limit) {
    throw usage_error(fmt::format("--max-restarts: '{}' is not a whole number from 0 to {}",
                                  o.max_restarts, max_restarts_limit));
  }
  a.no_restart_on = agent::parse_no_restart_on(o.no_restart_on);
  a.progress_file = o.progress_file;
  if (o.max_no_progress_restarts < 0 ||
      o.max_no_progress_restarts > static_cast<int>(max_restarts_limit)) {
    throw usage_error(fmt::format(
        "--max-no-progress-restarts: '{}' is not a whole number from 0 to {}",
        o.max_no_progress_restarts, max_restarts_limit));
  }
  a.max_no_progress_restarts = o.max_no_progress_restarts;
  a.hang_timeout = seconds_to_duration(o.hang_timeout, "--hang-timeout", {true, max_duration_s});
  // A positive timeout under a millisecond is the shortest one, not "off".
  if (o.hang_timeout > 0 && a.hang_timeout.count() == 0) {
    a.hang_timeout = std::chrono::milliseconds(1);
  }
  if (!o.section_timeouts.empty()) {
    a.section_timeouts = agent::parse_section_timeouts(o.section_timeouts);
  }
  a.stack_hook = !o.no_stack_hook && !o.no_python;
  resolve_health(o, c);
  resolve_preflight(o, c);
  if (o.metrics_port > max_port) {
    throw usage_error(fmt::format("--metrics-port: '{}' is not a whole number from 0 to {}",
                                  o.metrics_port, max_port));
  }
  a.metrics_port = o.metrics_port;
  a.metrics_host = o.metrics_host;
  a.signals = parse_signals(o.signals_to_handle);
  for (int sig : sched.extra_signals) {
    if (std::find(a.signals.begin(), a.signals.end(), sig) == a.signals.end()) {
      a.signals.push_back(sig);
    }
  }
  a.spec.signals_to_handle = o.signals_to_handle;
  resolve_preemption(o, a);
  a.log_dir = o.log_dir;
  if (o.quiet && o.verbose) {
    throw usage_error("--quiet and --verbose contradict each other; pass one of them");
  }
  a.report.level = o.quiet     ? agent::verbosity::quiet
                   : o.verbose ? agent::verbosity::verbose
                               : agent::verbosity::normal;
  a.report.event_log = resolve_torch_plugins(o);  // --event-log, --event-log-handler
}

}  // namespace dtrun::launcher
