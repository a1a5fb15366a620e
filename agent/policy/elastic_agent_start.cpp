// A round's start: the workers' environment, their folders and their
// spawn, and what watches the round once they run (elastic_agent_impl.h
// says which file holds what).
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "agent/health/host_name_check.h"
#include "agent/policy/elastic_agent_impl.h"
#include "agent/python/python_hook.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

// --preload's warm interpreter, started as the workers will be: the
// program, its flags and script, the environment every local worker
// shares (python_hook.h: the hook's folder first on PYTHONPATH).
void elastic_agent::impl::warm_up() {
  if (options_.preload.empty() || hook_dir_.empty()) return;
  spawn_request like{options_.program, options_.args, inherited_};
  add_python_hook_path(like.env, hook_dir_);
  for (auto& [k, v] : static_env(0)) like.env[k] = v;
  runner_.warm_up(like, (fs::path(run_dir_) / "preload.log").string(),
                  [this](const std::string& line) { log(line); },
                  [this](const std::string& line) { log_debug(line); });
}

env_map elastic_agent::impl::static_env(int local_rank) const {
  worker_group_spec spec = options_.spec;
  spec.timer_file = timer_file_;
  return static_worker_env(spec, local_rank, inherited_);
}

// One worker's start: its folder (error file cleared), its environment
// (torchrun's variables, the hook's, the heartbeat file's), its arguments.
spawn_request elastic_agent::impl::worker_request(const rendezvous::rendezvous_info& info,
                                                  int local_rank, const std::string& rank_dir,
                                                  const std::string& error_file) {
  const auto& spec = options_.spec;
  fs::create_directories(rank_dir);
  // What we read after a failure must be this worker's (torch's @record
  // overwrites, but a worker that fails without it must not inherit one).
  std::error_code stale;
  fs::remove(error_file, stale);

  spawn_request request{options_.program, options_.args, inherited_};
  request.python_worker = !options_.preload.empty();
  // Only the warm interpreter is started with it (a value in dtrun's own
  // environment would turn every worker into one).
  request.env.erase("DTRUN_PRELOAD");
  if (!hook_dir_.empty()) {
    std::string stacks_log = (fs::path(rank_dir) / "python_stacks.log").string();
    add_python_hook_env(request.env, hook_dir_, stacks_log);
    std::string exception_file = (fs::path(rank_dir) / "exception.txt").string();
    fs::remove(exception_file, stale);
    request.env["DTRUN_EXCEPTION_FILE"] = exception_file;
    add_progress_page(local_rank, rank_dir, request.env);
  }
  if (progress_) {
    // Touching it (any write, or its times set) is progress.
    request.env["DTRUN_HEARTBEAT_FILE"] = (fs::path(rank_dir) / "heartbeat").string();
    progress_->watch_rank_dir(local_rank, rank_dir, "heartbeat");
  }
  for (auto& [k, v] : static_env(local_rank)) request.env[k] = v;
  for (auto& [k, v] : round_worker_env(spec, info, local_rank, static_cast<int>(info.round))) {
    request.env[k] = v;
  }
  request.env["TORCHELASTIC_ERROR_FILE"] = error_file;
  if (nccl_traces_) {
    add_nccl_trace_env(request.env, fs::path(rank_dir).parent_path().string(), !hook_dir_.empty());
  }
  customize_worker(options_.worker_args, request.args, request.env);
  return request;
}

// The worker's progress page (progress_page.h), named by
// DTRUN_PROGRESS_PAGE; a page that cannot be made leaves the worker
// without one (dtrun.step() then does nothing), said once per worker.
void elastic_agent::impl::add_progress_page(int local_rank, const std::string& rank_dir,
                                            env_map& env) {
  std::string path = (fs::path(rank_dir) / "progress_page").string();
  try {
    pages_.add(local_rank, path);
    env["DTRUN_PROGRESS_PAGE"] = path;
    // The hook leaves DDP and the collectives alone (docs/stragglers.md).
    if (!options_.stragglers.worker_timing) env["DTRUN_WORKER_TIMING"] = "0";
  } catch (const std::exception& e) {
    log(fmt::format("warning: {}; dtrun.step() and dtrun.section() report nothing", e.what()));
  }
}

void elastic_agent::impl::start_workers(const rendezvous::rendezvous_info& info) {
  phase_ = phase::running;
  group_.clear();
  failure_.reset();
  job_restarts_.reset();
  awaiting_restart_count_ = false;
  stop_.reset();
  // A round after one without a machine failure here: the count of
  // failures in a row starts again (quarantine).
  if (!std::exchange(machine_failed_this_round_, false)) machine_failures_ = 0;
  // TORCHELASTIC_RESTART_COUNT is the round: the same on every node, and
  // new for every restart of the group, whatever its cause, so workers
  // that bootstrap from the agent store never meet a previous round's keys.
  round_info_ = info;
  ++rounds_;
  if (progress_) progress_->start_round();
  oom_kills_at_start_ = env_.oom_kills();
  const auto& spec = options_.spec;
  if (info.promoted) {
    log(fmt::format("round {}: promoted from spare to node {}", info.round, info.group_rank));
    reporter_.promoted(info.round, info.group_rank);
  }
  if (info.group_world_size > 1) {
    int first = global_rank(info, 0);
    log(fmt::format("round {}: node {} of {}, starting {} worker(s) as ranks {}..{}",
                    info.round, info.group_rank, info.group_world_size,
                    spec.local_world_size, first, first + spec.local_world_size - 1));
  }
  if (!host_name_checked_ &&
      host_name_check_applies(info.group_world_size, info.store_host, inherited_)) {
    host_name_checked_ = true;
    env_.check_host_name(io_,
                    [this](const std::string& line) { log(fmt::format("warning: {}", line)); });
  }
  pages_.clear();
  fs::path attempt_dir = fs::path(run_dir_) / fmt::format("attempt_{}", round_info_.round);
  for (int local_rank = 0; local_rank < spec.local_world_size; ++local_rank) {
    fs::path rank_dir = attempt_dir / std::to_string(local_rank);
    std::string error_file = (rank_dir / "error.json").string();
    spawn_request request = worker_request(info, local_rank, rank_dir.string(), error_file);
    int rank = global_rank(info, local_rank);
    child_stdio stdio = output_->prepare(
        local_rank, rank_dir.string(),
        line_prefix(options_.logs.line_prefix_template,
                    {spec.role, rank, local_rank, info.group_rank,
                     static_cast<int>(info.round), this_host_name()}));
    request.stdout_fd = stdio.out;
    request.stderr_fd = stdio.err;
    if (static_cast<std::size_t>(local_rank) < options_.worker_cpus.size()) {
      request.cpus = options_.worker_cpus[static_cast<std::size_t>(local_rank)];
    }
    spawn_result spawned = group_.spawn(local_rank, rank, request, error_file);
    output_->spawned(local_rank);
    if (!spawned.ok()) {
      runner_.round_spawned();
      log_error(spawned.error);
      reporter_.group_stopping(spawned.error);
      failure_ = failure{local_rank, rank, -1, {spawned.exit_code, 0}, {}, true};
      stop_because(stop::failure{});
      open_incident(failure_class::exit, "", rank, spawned.error, std::nullopt);
      count_restart(failure_record(records::record_kind::worker_failed, spawned.error));
      begin_stop(SIGTERM);
      return;
    }
    reporter_.worker_started(local_rank, rank, spawned.pid);
  }
  runner_.round_spawned();
  workers_running();
  if (sections_) {
    std::vector<int> local_ranks;
    for (const auto& w : group_.workers()) local_ranks.push_back(w.local_rank);
    sections_->start_round(std::move(local_ranks));
  }
  start_straggler_round(info);
  if (monitor_ && info.group_world_size > 1) monitor_->start_publishing();
  watch_round_end();
  watch_checkpoints();
  arm_health_check();
}

}  // namespace dtrun::agent
