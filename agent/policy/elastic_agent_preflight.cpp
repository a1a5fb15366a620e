// --preflight (docs/agent.md, "Preflight"): before a round's training,
// dtrun's own check script runs in the workers' place (the same
// interpreter, environment and ranks), its results become this node's
// figures, node 0 of the round judges every node's, and a node far below
// the job's median is named, kept in (warn) or sent away (leave,
// quarantine). Once per job by default: a restart or a lost node starts
// the next round at once (elastic_agent_impl.h says which file holds what).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/health/machine_identity.h"
#include "agent/health/preflight_plan.h"
#include "agent/health/preflight_result.h"
#include "agent/policy/elastic_agent_impl.h"
#include "agent/python/preflight_script.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every node's figures as node 0 read them, judged (rendezvous_handler::
// share_preflight's judge).
std::string judge_texts(const std::vector<std::string>& texts, rendezvous::preflight_room room,
                        preflight_action action) {
  std::vector<std::optional<preflight_node_figures>> figures;
  for (const auto& text : texts) {
    figures.push_back(text.empty() ? std::nullopt : preflight_node_figures::parse(text));
  }
  return judge_preflight(figures, room, action != preflight_action::warn).to_json();
}

}  // namespace

// The round's training, after the check when this round has one.
void elastic_agent::impl::start_checked(const rendezvous::rendezvous_info& info) {
  if (!options_.preflight.due(info.round)) return start_workers(info);
  if (options_.interpreter.empty()) {
    log("warning: --preflight runs dtrun's check script in Python, and this program is not "
        "run by Python (--no-python); starting without the check");
    return start_workers(info);
  }
  try {
    start_preflight(info);
  } catch (const std::exception& e) {
    log(fmt::format("warning: preflight: {}; starting without the check", e.what()));
    group_.clear();
    return start_workers(info);
  }
}

// One check worker per local rank, in the workers' place.
void elastic_agent::impl::start_preflight(const rendezvous::rendezvous_info& info) {
  fs::path dir = fs::path(run_dir_) / fmt::format("attempt_{}", info.round) / "preflight";
  std::string script = write_preflight_script(dir.string());
  preflight_plan plan;
  plan.node = info.group_rank;
  plan.nodes = info.group_world_size;
  plan.partners = partners_of(preflight_rounds(info.group_world_size), info.group_rank);
  plan.payload_bytes = options_.preflight.payload_bytes;
  plan.store_prefix = fmt::format("dtrun/preflight/{}/", info.round);
  plan.timeout_s = static_cast<double>(options_.preflight.timeout.count()) / 1000.0;
  std::ofstream(dir / "plan.json") << plan.to_json();
  phase_ = phase::preflight;
  group_.clear();
  stop_.reset();
  preflight_problem_.clear();
  preflight_started_ = env_.steady_now();
  log_debug(fmt::format("preflight: {} step(s) of pairs across {} node(s)", plan.partners.size(),
                        plan.nodes));
  for (int local_rank = 0; local_rank < options_.spec.local_world_size; ++local_rank) {
    spawn_preflight_worker(info, local_rank, dir, script);
  }
  watch_round_end();
  preflight_timer_.arm_after(options_.preflight.timeout, [this] {
    if (phase_ != phase::preflight || group_.waited_for() == 0) return;
    preflight_problem_ = fmt::format("the check did not finish within {} s",
                                     options_.preflight.timeout.count() / 1000);
    group_.stop(SIGTERM, options_.stop_timeout);
  });
  if (group_.waited_for() == 0) preflight_workers_done();
}

void elastic_agent::impl::spawn_preflight_worker(const rendezvous::rendezvous_info& info,
                                                 int local_rank, const fs::path& dir,
                                                 const std::string& script) {
  fs::path rank_dir = dir / std::to_string(local_rank);
  fs::create_directories(rank_dir);
  spawn_request request{options_.program,
                        {script, (dir / "plan.json").string(),
                         (rank_dir / "result.json").string()},
                        inherited_};
  for (auto& [k, v] : static_env(local_rank)) request.env[k] = v;
  for (auto& [k, v] : round_worker_env(options_.spec, info, local_rank,
                                       static_cast<int>(info.round))) {
    request.env[k] = v;
  }
  int rank = global_rank(info, local_rank);
  child_stdio stdio = output_->prepare(
      local_rank, rank_dir.string(),
      line_prefix(options_.logs.line_prefix_template,
                  {options_.spec.role, rank, local_rank, info.group_rank,
                   static_cast<int>(info.round), this_host_name()}));
  request.stdout_fd = stdio.out;
  request.stderr_fd = stdio.err;
  spawn_result spawned = group_.spawn(local_rank, rank, request, std::string());
  output_->spawned(local_rank);
  if (!spawned.ok() && preflight_problem_.empty()) {
    preflight_problem_ = fmt::format("rank {}'s check could not start: {}", rank, spawned.error);
  }
}

void elastic_agent::impl::preflight_worker_exited(const worker& w, const exit_status& status) {
  if (!status.ok() && preflight_problem_.empty()) {
    preflight_problem_ = fmt::format("rank {}'s check {}", w.rank, describe(status));
  }
  if (group_.waited_for() == 0) preflight_workers_done();
}

// The check's workers are gone: this node's figures, shared; node 0's
// verdict decides what follows.
void elastic_agent::impl::preflight_workers_done() {
  preflight_timer_.cancel();
  group_.cancel_stop();
  group_.end_round(stacks_->helper_pids());
  output_->end_round();
  fs::path dir = fs::path(run_dir_) / fmt::format("attempt_{}", round_info_.round) / "preflight";
  std::vector<preflight_rank_result> results;
  for (int local_rank = 0; local_rank < options_.spec.local_world_size; ++local_rank) {
    std::string error;
    auto text = read_file(dir / std::to_string(local_rank) / "result.json");
    if (auto r = preflight_rank_result::parse(text, error)) {
      results.push_back(std::move(*r));
    } else if (preflight_problem_.empty()) {
      preflight_problem_ = fmt::format("local rank {} wrote no result", local_rank);
    }
  }
  double seconds = std::chrono::duration<double>(env_.steady_now() - preflight_started_).count();
  auto figures = node_figures(round_info_.group_rank, reporter_.host(), results, seconds,
                              preflight_problem_);
  if (!preflight_problem_.empty()) {
    log(fmt::format("warning: preflight: {}; this node has no figures", preflight_problem_));
  }
  auto action = options_.preflight.action;
  rendezvous_.share_preflight(
      figures.to_json(), options_.preflight.timeout,
      [action](std::vector<std::string> texts, rendezvous::preflight_room room) {
        return judge_texts(texts, room, action);
      },
      [this, t = current_ticket()](std::string verdict) {
        if (!current(t) || phase_ != phase::preflight) return;
        preflight_decided(verdict);
      });
}

// Every node reads the same verdict: the named nodes that leave do, the
// others wait for the round's end they cause (a membership change), or
// start the training when nobody leaves.
void elastic_agent::impl::preflight_decided(const std::string& text) {
  auto verdict = preflight_verdict::parse(text);
  if (!verdict) {
    log("warning: preflight: no verdict came from the round's node 0; starting the training");
    return start_workers(round_info_);
  }
  preflight_verdict_ = *verdict;
  log(summary_line(*verdict));
  for (const auto& missing : verdict->unmeasured) {
    log(fmt::format("warning: preflight: no figures from {}", missing));
  }
  bool someone_leaves = false;
  for (const auto& slow : verdict->slow) {
    someone_leaves = someone_leaves || slow.leaves;
    log(fmt::format("warning: preflight: {}{}", describe(slow),
                    verdict_consequence("preflight-action", options_.preflight.action,
                                        slow.leaves, preflight_verdict_->kept_because)));
  }
  reporter_.preflight(*verdict, preflight_action_name(options_.preflight.action));
  const auto* mine = verdict->named(round_info_.group_rank);
  if (mine != nullptr && mine->leaves) return leave_after_preflight(*mine);
  if (!someone_leaves) return start_workers(round_info_);
  log("preflight: waiting for the slow node(s) to leave; the job then starts without them");
}

// This node was named and there is room to lose it: it leaves as an
// unhealthy node does, or is quarantined.
void elastic_agent::impl::leave_after_preflight(const preflight_slow_node& mine) {
  auto reason = fmt::format("preflight: {}", describe(mine));
  if (options_.preflight.action == preflight_action::quarantine) {
    if (machine_key_.empty()) machine_key_ = this_machine_identity(env_.nvml()).key;
    return enter_quarantine(reason, -1, "preflight");
  }
  log_error(fmt::format("{}; this node leaves the job (exit {})", reason, exit_node_unhealthy));
  rendezvous_.leave_job(records::leaving(failure_class::health, reason),
                        [this, reason, t = current_ticket()] {
    if (!current(t)) return;
    reporter_.node_left(reason);
    finish(exit_node_unhealthy);
  });
}

}  // namespace dtrun::agent
