// The agent's policy: rounds, the workers' ends, restarts and the end
// (elastic_agent_impl.h says which file holds what).
#include "agent/policy/elastic_agent.h"

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/process/kill_watch.h"
#include "agent/health/node_health_checks.h"
#include "agent/process/posix_process_runner.h"
#include "agent/python/preload_runner.h"
#include "agent/python/python_hook.h"
#include "agent/policy/run_folder.h"
#include "agent/process/worker_process.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

// The caller's log function (tests) gets each line without the prefix.
agent_log::sink log_sink(std::function<void(const std::string&)> log) {
  if (!log) return {};
  return [log = std::move(log)](const std::string& text) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      if (line.rfind(agent_log::prefix, 0) == 0) line.erase(0, agent_log::prefix.size());
      log(line);
      start = end + 1;
    }
  };
}

// The disposition dtrun was started with (read before the signal_set
// installs its handler) is SIG_IGN.
bool ignored_at_start(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
         current.sa_handler == SIG_IGN;
}

}  // namespace

elastic_agent::impl::impl(asio::io_context& io, agent_options options,
                          rendezvous::rendezvous_handler& rendezvous, process_runner& runner,
                          stack_capture_options stack_options,
                          node_health_checker* health, agent_env* env)
    : io_(io),
      own_env_(env == nullptr ? system_agent_env() : nullptr),
      env_(env == nullptr ? *own_env_ : *env),
      options_(std::move(options)),
      rendezvous_(rendezvous),
      runner_(runner),
      signals_(io),
      group_(io, runner, group_hooks()),
      stack_options_(std::move(stack_options)),
      inherited_(current_environment()),
      reporter_(options_.report, log_sink(options_.log), rendezvous),
      health_(health),
      health_timer_(io),
      preempt_timer_(io) {}

elastic_agent::impl::~impl() {
  std::error_code ignored;
  if (remove_run_dir_ && !run_dir_.empty()) fs::remove_all(run_dir_, ignored);
}

int elastic_agent::impl::run() {
  // Signals first: Ctrl-C must reach this loop.
  for (int sig : options_.signals) {
    // Ignored when we started (nohup, a shell's `trap '' HUP`, `cmd &`
    // for SIGINT): whoever started us asked for that, so it stays ignored
    // here and, inherited through exec, in the workers.
    if (ignored_at_start(sig)) {
      log_debug(fmt::format("{} is ignored (as dtrun was started): not handled or forwarded",
                            signal_name(sig)));
      continue;
    }
    signals_.add(sig);
  }
  wait_for_signal();
  watch_launcher();
  // Before the first worker: one that dies before we listen must not be
  // missed (process_runner::start; the orphan guard starts here too).
  group_.start();
  // Hang detection must see the workers' output even where it would go
  // straight to the console.
  logs_ = options_.logs;
  if (options_.hang_timeout.count() > 0) logs_.watch_console = true;
  output_.emplace(io_, logs_, [this](const std::string& line) { log_error(line); });
  bool writes_logs = options_.logs.writes_files(options_.spec.local_world_size);
  remove_run_dir_ = options_.log_dir.empty() && !writes_logs;
  run_dir_ = make_run_dir(options_.log_dir, rendezvous_.run_id());
  if (writes_logs && options_.log_dir.empty()) {
    log(fmt::format("worker logs: {} (kept; choose the folder with --log-dir)", run_dir_));
  }
  if (options_.stack_hook) {
    hook_dir_ = (fs::path(run_dir_) / "python").string();
    try {
      write_python_hook(hook_dir_);
    } catch (const std::exception&) {
      // Nothing ran yet (a full disk, a quota): leave no empty folders
      // behind, in --log-dir too. remove() takes only an empty folder.
      std::error_code ignored;
      fs::remove(fs::path(hook_dir_) / "modules", ignored);
      fs::remove(hook_dir_, ignored);
      fs::remove(run_dir_, ignored);
      throw;
    }
  }
  stacks_.emplace(io_, stack_options_, run_dir_, hook_dir_);
  warm_up();
  start_watchdog();
  start_hang_detection();
  start_section_watch();
  start_straggler_watch();
  start_monitor();
  reporter_.agent_started(config_summary());
  // The step before any round (--progress-file: a step already there is
  // not this run's progress).
  if (!options_.progress_file.empty()) {
    std::string absent;
    progress_stalls_.emplace(env_.progress_step(options_.progress_file, absent));
  }
  start_gpu_watch();
  if (health_ == nullptr) {
    own_health_ = std::make_unique<node_health_checks>(
        io_, options_.health, options_.log_dir.empty() ? run_dir_ : options_.log_dir, inherited_,
        env_.nvml(), runner_, group_, [this](const std::string& line) { log_debug(line); });
    health_ = own_health_.get();
  }
  before_first_join();
  io_.run();
  return exit_code_;
}

nlohmann::ordered_json elastic_agent::impl::config_summary() const {
  return {{"role", options_.spec.role},
          {"nproc_per_node", options_.spec.local_world_size},
          {"max_restarts", options_.spec.max_restarts},
          {"program", options_.program},
          {"args", options_.args},
          {"stop_timeout_ms", options_.stop_timeout.count()},
          {"run_dir", run_dir_}};
}

// What failed, and the restarts, in the words of the summary's header.
summary_context elastic_agent::impl::failure_context(std::string outcome) const {
  summary_context c;
  c.program = options_.script_name.empty() ? options_.program : options_.script_name;
  c.run_id = rendezvous_.run_id();
  c.outcome = std::move(outcome);
  return c;
}

void elastic_agent::impl::start_round() {
  phase_ = phase::rendezvous;
  ++ticket_;
  reporter_.rendezvous_started();
  rendezvous_.next_round([this, t = current_ticket()](std::exception_ptr error,
                                                      rendezvous::rendezvous_info info) {
    // A signal ended the run meanwhile.
    if (!current(t) || phase_ != phase::rendezvous) return;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const rendezvous::job_stopped_error& e) {
        stopped_elsewhere(e.who);
        return;
      } catch (const rendezvous::job_finished_error& e) {
        log(fmt::format("{}; exiting with 0", e.what()));
        reporter_.job_succeeded();
        return finish(0);
      } catch (const rendezvous::job_failed_error& e) {
        log_error(e.what());
        auto outcome = e.refused ? std::string("failed on another node, not restarted there")
                               : fmt::format("failed on another node, --max-restarts={} used up",
                                             options_.spec.max_restarts);
        reporter_.summarize_failure(e.round, failure_context(outcome), [this](int code) {
          // Our own worker's code when one of ours failed, else the root cause's.
          finish(failure_ ? failure_->status.code : code);
        });
        return;
      } catch (const std::exception& e) {
        log_error(fmt::format("rendezvous failed: {}", e.what()));
        reporter_.rendezvous_failed(e.what());
      }
      finish(1);
      return;
    }
    // A Ctrl-C whose finish waits for the store to have it: no workers.
    if (signalled()) return;
    // Reported now: a wait for --preload's warm interpreter is not the
    // rendezvous's time (the reporter keeps a pointer: the member).
    round_info_ = info;
    reporter_.rendezvous_completed(round_info_, global_rank(info, 0));
    // With --preload, once the warm interpreter has imported (it began
    // when the agent started, so mostly it has).
    runner_.when_warm([this, info, t] {
      // A signal ended the run meanwhile (or will, once the store has it).
      if (!current(t) || phase_ != phase::rendezvous || signalled()) return;
      start_checked(info);
    });
  });
}

// Another node failed, died or wants in: stop ours and meet again.
void elastic_agent::impl::watch_round_end() {
  rendezvous_.watch_round([this](records::round_record end) {
    if (held_) return end_hold();  // the round's first end decides (elastic_agent_hold.cpp)
    if (phase_ != phase::running && phase_ != phase::exiting && phase_ != phase::preflight) {
      return;
    }
    if (end.kind == records::record_kind::job_stopped) {
      return stopped_elsewhere(records::stopped_by(end));
    }
    log(fmt::format("the group must restart: {}; stopping the workers to rejoin",
                    records::describe(end)));
    reporter_.membership_change(end);
    round_end_incident(end);
    stop_because(round_end_reason(end));
    if (phase_ == phase::exiting) {
      start_round();
      return;
    }
    begin_stop(SIGTERM);
  });
}

// What the worker group tells the agent.
worker_group::hooks elastic_agent::impl::group_hooks() {
  worker_group::hooks hooks;
  hooks.exited = [this](worker& w, const exit_status& status,
                        std::chrono::system_clock::time_point at) {
    on_worker_exit(w, status, at);
  };
  hooks.unkillable = [this](const std::vector<worker_group::unkillable_worker>& given_up) {
    kills_overdue(given_up);
  };
  hooks.drain = [this](int local_rank, std::function<void()> then) {
    output_->when_drained(local_rank, std::move(then));
  };
  hooks.reaped = [this](pid_t pid) {
    if (watchdog_) watchdog_->forget(pid);
  };
  hooks.log = [this](const std::string& line) { log(line); };
  return hooks;
}

void elastic_agent::impl::on_worker_exit(const worker& w, const exit_status& status,
                                         std::chrono::system_clock::time_point exited_at) {
  // dtrun's check, not the training: no failure (elastic_agent_preflight.cpp).
  if (phase_ == phase::preflight) return preflight_worker_exited(w, status);
  // A SIGKILL dtrun did not send, while the kernel counted an OOM kill in
  // the workers' memory cgroup: the OOM killer's victim, proven.
  bool oom_killed = false;
  if (status.signal == SIGKILL && w.watchdog_signal != SIGKILL && oom_kills_at_start_) {
    auto now = env_.oom_kills();
    oom_killed = now && *now > *oom_kills_at_start_;
  }
  auto record = reporter_.worker_exited(
      worker_exit{round_info_.round, reporter_.host(), round_info_.group_rank, w.local_rank,
                  w.rank, w.pid, status,
                  exited_at, w.error_file, fs::path(w.error_file).parent_path().string(),
                  w.watchdog_signal != 0 && status.signal == w.watchdog_signal && w.hang.empty()
                      ? w.watchdog
                      : std::string(),
                  w.watchdog_signal != 0 && status.signal == w.watchdog_signal ? w.hang
                                                                               : std::string(),
                  options_.interpreter, oom_killed,
                  w.watchdog_signal != 0 && status.signal == w.watchdog_signal ? w.hang_section
                                                                               : std::string()},
      phase_ == phase::stopping, stop_signal(stop_), [] {});
  if (record && !record->error_file.empty()) error_file_named_ = true;
  if (phase_ == phase::running) {
    if (!status.ok()) {
      std::string why = record && !record->message.empty() ? ": " + record->message : "";
      log_error(fmt::format(
          "worker local_rank={} (rank {}, pid {}) {}{}; stopping the other workers", w.local_rank,
          w.rank, w.pid, describe(status), why));
      reporter_.group_stopping(fmt::format("worker rank {} {}", w.rank, describe(status)));
      failure_ = failure{w.local_rank, w.rank, w.pid, status, w.error_file, false,
                         machine_fault(status, record ? record->message : std::string())};
      if (record) {
        failure_->klass = parse_class(record->failure_class).value_or(failure_class::exit);
        failure_->exception_type = record->exception_type;
        failure_->lost_peer = record->lost_peer;
        failure_->section = record->hang_section;
      }
      ++failures_;
      stop_because(stop::failure{});
      // A hang's culprit failed when the job stopped progressing.
      auto failed_at = failure_->klass == failure_class::hang ? exited_at - hang_idle_ : exited_at;
      open_incident(failure_->klass, failure_->exception_type, w.rank,
                    fmt::format("worker rank {} {}", w.rank, describe(status)), failed_at);
      if (incident_) incident_->section = failure_->section;
      count_or_hold(failure_record(records::record_kind::worker_failed,
                                   fmt::format("worker rank {} {}", w.rank, describe(status))));
      begin_stop(SIGTERM);
    } else if (group_.waited_for() == 0) {
      end_round();
      exit_barrier();
    }
  } else if (phase_ == phase::stopping && group_.waited_for() == 0) {
    group_stopped();
  }
}

// The two-phase stop (worker_group::stop): `sig` now, SIGKILL when the
// grace period ends.
void elastic_agent::impl::begin_stop(int sig) {
  // A stop is lost time (docs/agent.md, "Incidents and goodput"): the
  // workers' productive time ends here, not when the last one is reaped.
  workers_stopped();
  phase_ = phase::stopping;
  if (progress_) progress_->stop();
  if (sections_) sections_->stop();
  stop_straggler_watch();
  group_.stop(sig, options_.stop_timeout);
  if (group_.waited_for() == 0) group_stopped();
}

// Workers still not reaped a grace after their SIGKILL: one line each
// naming its state, and the agent stops waiting for them. A stop goes on
// without them; a worker killed while the group ran (a hang's culprit,
// the file-timer watchdog's SIGKILL) is this round's failure. Either way
// the node then leaves the job (leave_unclean). Their exit, should it
// ever come, is still reaped (process_runner).
void elastic_agent::impl::kills_overdue(
    const std::vector<worker_group::unkillable_worker>& given_up) {
  const worker* first = nullptr;
  for (const auto& [w, state] : given_up) {
    log_error(unkillable_line(w->rank, w->pid, state, group_.kill_grace()));
    reporter_.worker_unkillable(w->local_rank, w->rank, w->pid, state);
    if (first == nullptr) first = w;
  }
  // The first worker that did not die: why this node leaves (leave_unclean).
  if (first != nullptr && !stopping_for<stop::unkillable_worker>()) {
    stop_because(stop::unkillable_worker{fmt::format("rank {} (pid {})", first->rank, first->pid)});
  }
  if (phase_ == phase::running) {
    auto reason = fmt::format("worker rank {} did not die on SIGKILL", first->rank);
    reporter_.group_stopping(reason);
    failure_ = failure{first->local_rank, first->rank, first->pid, {128 + SIGKILL, SIGKILL},
                       first->error_file, false};
    failure_->klass = !first->hang.empty()       ? failure_class::hang
                      : !first->watchdog.empty() ? failure_class::watchdog
                                                 : failure_class::signal;
    failure_->section = first->hang_section;
    ++failures_;
    open_incident(failure_->klass, "", first->rank, reason, std::nullopt);
    count_restart(failure_record(records::record_kind::worker_failed, reason));
    begin_stop(SIGTERM);
  } else if (phase_ == phase::stopping && group_.waited_for() == 0) {
    group_stopped();
  } else if (phase_ == phase::preflight && group_.waited_for() == 0) {
    preflight_workers_done();
  }
}

// Our workers all succeeded. Nodes that host the store must not leave
// the others without it, so everyone waits (bounded) for everyone; a
// failure elsewhere meanwhile brings us back for the next round.
void elastic_agent::impl::exit_barrier() {
  phase_ = phase::exiting;
  rendezvous_.finish([this, t = current_ticket()](std::exception_ptr error) {
    if (!current(t) || phase_ != phase::exiting) return;
    if (error) return;  // the round is over: watch_round's callback rejoins
    reporter_.job_succeeded();
    finish(exit_code_after_success());
  });
}

// Leaves nothing of the round behind: grandchildren still in a worker's
// group, and orphans that left it (adopted by us as subreaper).
void elastic_agent::impl::end_round() {
  workers_stopped();
  cancel_health_check();
  if (progress_) progress_->stop();
  if (sections_) sections_->stop();
  stop_straggler_watch();
  std::vector<pid_t> keep = stacks_->helper_pids();  // eu-stack: ends on its own
  group_.end_round(std::move(keep));
  output_->end_round();
  if (watchdog_) watchdog_->forget_all();
}

// Once: a completion that arrives after (shutdown() fails pending
// rendezvous calls synchronously) must not change the exit code.
void elastic_agent::impl::finish(int code) {
  if (phase_ == phase::done) return;
  phase_ = phase::done;
  ++ticket_;  // every callback still in flight is stale now
  exit_code_ = code;
  workers_stopped();
  close_incident(false);  // the job ended with it
  keep_named_files(code);
  reporter_.agent_exiting(code);
  group_.cancel_timers();
  hold_timer_.cancel();
  preflight_timer_.cancel();
  cancel_health_check();
  // What a health check left behind in a session of its own (no round's
  // end swept it: the node may never have run workers).
  runner_.kill_adopted(stacks_ ? stacks_->helper_pids() : std::vector<pid_t>{});
  if (reclaim_) reclaim_->cancel();
  watchdog_.reset();  // closes and removes the pipe
  monitor_.reset();   // removes the control socket; closes the metrics port
  if (stacks_) stacks_->stop();  // a capture under way: its eu-stack children are killed
  rendezvous_.shutdown();
  // The signal set stays installed until the agent is destroyed, so a
  // late Ctrl-C cannot kill the agent halfway through its teardown.
  io_.stop();
}

// Without --log-dir the run folder is temporary, but what dtrun named in
// it must outlive dtrun: the stacks-<n>.txt files of a hang summary or of
// `dtrun stacks`, and the error.json a failure summary shows.
void elastic_agent::impl::keep_named_files(int code) {
  if (!remove_run_dir_ || run_dir_.empty()) return;
  bool stacks_named = stacks_ && stacks_->written();
  const char* why = stacks_named                     ? "it holds the stacks files dtrun named"
                    : code != 0 && error_file_named_ ? "it holds the error file named above"
                                                     : nullptr;
  if (why == nullptr) return;
  remove_run_dir_ = false;
  log(fmt::format("run folder: {} (kept: {}; choose the folder with --log-dir)",
                  printable(run_dir_), why));
}

namespace {

// Workers by exec, or forked from a warm interpreter (--preload).
std::unique_ptr<process_runner> real_runner(asio::io_context& io, const agent_options& options) {
  auto plain = std::make_unique<posix_process_runner>(io);
  if (options.preload.empty()) return plain;
  return std::make_unique<preload_runner>(io, std::move(plain), options.preload,
                                          options.worker_args.script_args_at);
}

}  // namespace

elastic_agent::elastic_agent(asio::io_context& io, agent_options options,
                             rendezvous::rendezvous_handler& rendezvous)
    : own_runner_(real_runner(io, options)),
      impl_(std::make_unique<impl>(io, std::move(options), rendezvous, *own_runner_,
                                   stack_capture_options{}, nullptr, nullptr)) {}

elastic_agent::elastic_agent(asio::io_context& io, agent_options options,
                             rendezvous::rendezvous_handler& rendezvous, process_runner& runner,
                             stack_capture_options stacks, node_health_checker* health,
                             agent_env* env)
    : impl_(std::make_unique<impl>(io, std::move(options), rendezvous, runner,
                                   std::move(stacks), health, env)) {}

elastic_agent::~elastic_agent() = default;

int elastic_agent::run() { return impl_->run(); }

}  // namespace dtrun::agent
