// elastic_agent's implementation, shared by its files (private to
// agent/policy/):
//   elastic_agent.cpp          rounds, the workers' ends, the end
//   elastic_agent_start.cpp    a round's start: the workers' environment,
//                              folders and spawn
//   stop_reason.h              why a round stops, and what follows (a table)
//   elastic_agent_restart.cpp  after a stop: rejoin, restart or fail the job
//   elastic_agent_hold.cpp     a failure a lost peer can cause, held until
//                              the round's end or the departure bound
//   elastic_agent_signals.cpp  signals, Ctrl-C across nodes, the launcher's pipe
//   elastic_agent_watch.cpp    the file-timer watchdog, hang detection,
//                              `dtrun status` and `dtrun stacks`
//   elastic_agent_health.cpp   node health checks; leaving when unhealthy
//   elastic_agent_quarantine.cpp  machines kept out after failing in a row
//   elastic_agent_reclaim.cpp  the GPUs given back before a new round
//   elastic_agent_incidents.cpp  what ended each round, what it cost
//                              (event log, /metrics), and whether a
//                              failure is worth a restart (--no-restart-on,
//                              --progress-file)
//   elastic_agent_preempt.cpp  a job-wide checkpoint; leaving when preempted
//   elastic_agent_preflight.cpp  --preflight: dtrun's check in the workers'
//                              place before a round's training, its verdict
//   elastic_agent_stragglers.cpp  stragglers: own work per step shared, node
//                              0's verdict, a named node's line or leaving
// The policy only: the workers' processes are worker_group's, through a
// process_runner, and the machine is asked through agent_env (docs/design.md,
// "The agent: policy and parts").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include "agent/monitor/control_socket.h"
#include "agent/policy/agent_env.h"
#include "agent/policy/elastic_agent.h"
#include "agent/policy/stop_reason.h"
#include "agent/spec/exit_status.h"
#include "agent/spec/failure_class.h"
#include "agent/report/failure_report.h"
#include "agent/watch/file_timer.h"
#include "agent/devices/gpu_reclaim.h"
#include "agent/devices/nvml_api.h"
#include "agent/monitor/job_monitor.h"
#include "agent/health/node_health.h"
#include "agent/health/preflight_verdict.h"
#include "agent/watch/progress_monitor.h"
#include "agent/watch/hang_report.h"
#include "agent/watch/progress_page.h"
#include "agent/watch/section_learner.h"
#include "agent/watch/section_watch.h"
#include "agent/watch/straggler_watch.h"
#include "agent/health/quarantine_record.h"
#include "agent/spec/restart_policy.h"
#include "agent/report/run_reporter.h"
#include "agent/process/stdin_watch.h"
#include "agent/watch/timer_table.h"
#include "agent/spec/worker_env.h"
#include "agent/process/worker_group.h"
#include "agent/output/worker_output.h"
#include "agent/process/worker_process.h"
#include "agent/watch/worker_stacks.h"
#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {
namespace asio = boost::asio;

class elastic_agent::impl {
 public:
  impl(asio::io_context& io, agent_options options, rendezvous::rendezvous_handler& rendezvous,
       process_runner& runner, stack_capture_options stack_options,
       node_health_checker* health, agent_env* env);
  ~impl();
  int run();

 private:
  // The first failure of a round: the root cause we report and exit with.
  struct failure {
    int local_rank = 0;
    int rank = 0;
    pid_t pid = -1;
    exit_status status;
    std::string error_file;
    bool spawn_failed = false;  // exec() failed: restarting would not help
    // Non-empty: a fault that follows the machine (quarantine_record.h).
    std::string machine_fault;
    failure_class klass = failure_class::exit;
    std::string exception_type;
    bool lost_peer = false;  // a lost peer can cause it (failure_class.h)
    std::string section;     // klass hang: the section overstayed (--section-timeouts)
  };

  // What ended a round, from then until the workers run again (or the job
  // ends): the event log's `incident` (docs/agent.md).
  struct incident {
    std::int64_t round = 0;
    failure_class klass = failure_class::exit;
    std::string exception_type;
    std::optional<int> rank;  // the culprit's global rank, when one is known
    bool here = true;         // the culprit ran on this node
    std::string detail;
    std::chrono::system_clock::time_point failed_at;
    std::chrono::system_clock::time_point detected_at;
    bool failed_at_known = false;
    std::optional<std::int64_t> step;  // --progress-file's step then
    // A departure ended the round before this node's failure was counted:
    // that failure, which the departure caused (elastic_agent_hold.cpp).
    std::string caused;
    // Another node failed the job (a job_failed record): no round follows,
    // so this node counts nothing for --max-no-progress-restarts.
    bool ends_job = false;
    std::string section;  // a hang of this section (--section-timeouts)
  };

  // preflight: dtrun's check runs in the workers' place, or its verdict is
  // awaited (elastic_agent_preflight.cpp). stopping: why is stop_ (stop_reason.h). exiting: our workers all
  // succeeded; waiting in the exit barrier for the other nodes. outside:
  // out of the job for a while (unhealthy, or in quarantine), to check and
  // rejoin later. reclaiming: stopped; waiting for the GPUs to be given back.
  enum class phase {
    starting,
    rendezvous,
    preflight,
    running,
    stopping,
    reclaiming,
    exiting,
    outside,
    done
  };

  // A callback's round: one ticket per round (and a last one once the agent
  // finishes), so a callback for an earlier round, or one that comes after
  // the end, does nothing (as the rendezvous's round_ticket).
  using ticket = std::uint64_t;
  ticket current_ticket() const { return ticket_; }
  bool current(ticket t) const { return phase_ != phase::done && t == ticket_; }

  // Why the workers stop (or the agent ends): the decisive reason so far.
  void stop_because(stop_reason reason) {
    stop_ = stop_ ? decisive(*stop_, reason) : std::move(reason);
  }
  template <class Reason>
  const Reason* stopping_for() const {
    return stop_ ? std::get_if<Reason>(&*stop_) : nullptr;
  }
  // A signal (here or another node's Ctrl-C) ends this agent.
  bool signalled() const { return stop_signal(stop_) != 0; }
  // A signal came here (not another node's Ctrl-C): the next one kills.
  bool signalled_here() const {
    const auto* s = stopping_for<stop::signal>();
    return signalled() && (s == nullptr || !s->from_elsewhere);
  }
  // A round's end elsewhere as a reason to stop: the job's end when
  // another node failed it, else a membership change.
  static stop_reason round_end_reason(const records::round_record& end) {
    if (end.kind == records::record_kind::job_failed) return stop::job_over{};
    return stop::membership_change{};
  }

  void log(const std::string& line) { reporter_.log().info(line); }
  void log_error(const std::string& line) { reporter_.log().error(line); }
  void log_debug(const std::string& line) { reporter_.log().debug(line); }

  // elastic_agent.cpp
  nlohmann::ordered_json config_summary() const;
  void warm_up();
  summary_context failure_context(std::string outcome) const;
  void start_round();
  spawn_request worker_request(const rendezvous::rendezvous_info& info, int local_rank,
                               const std::string& rank_dir, const std::string& error_file);
  void start_workers(const rendezvous::rendezvous_info& info);
  void add_progress_page(int local_rank, const std::string& rank_dir, env_map& env);
  void watch_round_end();
  worker_group::hooks group_hooks();
  void on_worker_exit(const worker& w, const exit_status& status,
                      std::chrono::system_clock::time_point exited_at);
  void begin_stop(int sig);
  void kills_overdue(const std::vector<worker_group::unkillable_worker>& given_up);
  void exit_barrier();
  void end_round();
  void finish(int code);
  void keep_named_files(int code);

  // elastic_agent_restart.cpp
  void group_stopped();
  void after_stop();
  void rejoin();
  void count_restart(records::round_record failure);
  void decide_restart();
  void leave_unclean(const std::string& who);

  // elastic_agent_hold.cpp
  void count_or_hold(records::round_record failure);
  void end_hold();
  void failure_explained(const records::round_record& ended_by);

  // elastic_agent_signals.cpp
  void watch_launcher();
  void wait_for_signal();
  void on_signal(int sig);
  void stop_the_job(int sig);
  void finish_after_job_stop(int code);
  void stopped_elsewhere(const std::string& who);

  // elastic_agent_health.cpp
  void check_health_then_join();
  bool report_health(const health_verdict& verdict, const char* when);
  void note_health(const health_verdict& verdict);
  void arm_health_check();
  void cancel_health_check();
  void leave_unhealthy(const std::string& reason);
  void leave_job(const std::string& reason);

  // elastic_agent_quarantine.cpp
  void before_first_join();
  void machine_failed(const std::string& reason, int rank, const std::string& fault);
  void enter_quarantine(const std::string& reason, int rank, const std::string& fault);
  void sit_out(std::chrono::milliseconds duration);
  void judge_machine_fault(std::function<void()> restart);
  void write_quarantine_file();
  bool signalled_meanwhile();

  // elastic_agent_reclaim.cpp
  void start_gpu_watch();
  void after_gpus_reclaimed(std::function<void()> then);

  // elastic_agent_incidents.cpp
  void open_incident(failure_class klass, std::string exception_type, std::optional<int> rank,
                     std::string detail,
                     std::optional<std::chrono::system_clock::time_point> failed_at,
                     bool here = true);
  void round_end_incident(const records::round_record& end);
  void workers_running();
  void workers_stopped();
  void close_incident(bool resumed);
  std::optional<std::string> restart_refused(bool restarts_left);
  std::optional<std::string> no_progress_stop(int restarts_left);
  std::optional<std::int64_t> read_step();
  std::string failure_tag() const;
  // This node's failure (failure_) as a round record of `kind`
  // (worker_failed, job_failed), with `detail` as its words.
  records::round_record failure_record(records::record_kind kind, std::string detail) const;
  void say_flight_recorder_dumps();
  // elastic_agent_preempt.cpp
  bool preemption_signal(int sig);
  void request_checkpoint(const std::string& why);
  void watch_checkpoints();
  void checkpoint_requested(const std::string& who);
  void begin_preemption(int sig);
  void leave_preempted();
  int exit_code_after_success();

  // elastic_agent_preflight.cpp
  void start_checked(const rendezvous::rendezvous_info& info);
  void start_preflight(const rendezvous::rendezvous_info& info);
  void spawn_preflight_worker(const rendezvous::rendezvous_info& info, int local_rank,
                              const std::filesystem::path& dir, const std::string& script);
  void preflight_worker_exited(const worker& w, const exit_status& status);
  void preflight_workers_done();
  void preflight_decided(const std::string& text);
  void leave_after_preflight(const preflight_slow_node& mine);

  // elastic_agent_stragglers.cpp
  void start_straggler_watch();
  void start_straggler_round(const rendezvous::rendezvous_info& info);
  void stop_straggler_watch();
  std::vector<rank_work_sample> straggler_samples();
  void stragglers_named(const std::vector<named_straggler>& fresh);
  void straggler_verdict(const std::vector<named_straggler>& now);

  // elastic_agent_watch.cpp
  void start_watchdog();
  void start_hang_detection();
  void on_hang(std::chrono::milliseconds idle);
  std::optional<hang_report> hang_report_of(const std::vector<captured_stack>& stacks,
                                            std::int64_t round, ticket t);
  void start_monitor();
  job_status facts() const;  // what this agent knows; the monitor measures the rest
  std::string phase_name() const;
  void stacks_on_request(control_socket::respond_fn respond);
  void watchdog_expired(const timer_table::expired& e);

  // elastic_agent_sections.cpp
  void start_section_watch();
  void load_learned_sections();
  void save_learned_sections();
  void on_section_hang(const section_overstay& late);
  void kill_section_culprit(const section_overstay& late, const std::string& limit,
                            const hang_report& report);

  asio::io_context& io_;
  // The machine (agent_env.h): the tests' or own_env_; first, so that
  // everything after it may use it, and it is destroyed last.
  std::unique_ptr<agent_env> own_env_;
  agent_env& env_;
  // As the launcher resolved them (--dry-run shows them): never changed;
  // what the agent works out while running is its own state below.
  const agent_options options_;
  rendezvous::rendezvous_handler& rendezvous_;
  process_runner& runner_;  // the workers', and the health check command's
  asio::signal_set signals_;
  worker_group group_;
  stack_capture_options stack_options_;
  env_map inherited_;
  // Whether this host's name was checked for gloo (host_name_check.h).
  bool host_name_checked_ = false;
  // The current round's facts, as the rendezvous gave them: the round,
  // this node's rank and the node count are read from here (the reporter
  // too, by reference: declared before it, destroyed after it).
  rendezvous::rendezvous_info round_info_;
  run_reporter reporter_;
  std::optional<stdin_watch> launcher_;  // dtrun --hosts: the pipe from the launcher
  std::optional<worker_output> output_;
  std::optional<file_timer> watchdog_;
  std::optional<progress_monitor> progress_;
  std::optional<job_monitor> monitor_;
  std::optional<worker_stacks> stacks_;
  std::string hook_dir_;  // empty: no start-up hook
  // The round's progress pages (dtrun.step, dtrun.section), one per
  // worker, where the hook is on (it makes the module importable).
  progress_pages pages_;
  // --section-timeouts: what `auto` learned (kept across rounds) and the
  // watch of the running round.
  std::optional<section_learner> learner_;
  std::optional<section_watch> sections_;
  // Stragglers (elastic_agent_stragglers.cpp): the watch (none without the
  // hook or with --worker-timing=off), each rank's last step shared, the
  // verdict as last read (`dtrun status`), whether this node said it was
  // named in this streak, and whether it leaves into quarantine.
  struct straggler_state {
    std::optional<straggler_watch> watch;
    std::map<int, std::int64_t> published;
    std::vector<named_straggler> verdict;
    bool said = false;
    bool quarantine = false;
  } stragglers_;
  // torchrun's file-timer watchdog's pipe (TORCHELASTIC_TIMER_FILE);
  // empty: none.
  std::string timer_file_;
  // The workers' output as routed: options_.logs, and with --hang-timeout
  // the console watched too (hang detection, `dtrun status` see it).
  log_spec logs_;
  // The workers' static environment: the spec's, and the timer file.
  env_map static_env(int local_rank) const;
  // Node health: the checker (the tests' or own_health_; null: no checks),
  // the periodic check's timer, and why this node is leaving the job.
  std::unique_ptr<node_health_checker> own_health_;
  node_health_checker* health_ = nullptr;
  generation_timer health_timer_;
  // Each check's latest failures (note_health), for `dtrun status`.
  std::vector<health_finding> health_failing_;
  bool departed_ = false;  // the other nodes were told this node leaves
  // Quarantine: machine failures in a row, whether this round had one
  // (a round without resets the count), and this machine's quarantines.
  int machine_failures_ = 0;
  bool machine_failed_this_round_ = false;
  int quarantines_ = 0;
  std::string machine_key_;  // this machine's (--quarantine-after's key)
  // The GPUs' memory before the first round, and the reclaim's waiter.
  gpu_memory_levels gpu_baseline_;
  std::optional<gpu_reclaim_waiter> reclaim_;
  // The node has NVIDIA GPUs: the workers get torch's NCCL flight recorder.
  bool nccl_traces_ = false;
  // Incidents and goodput: the open incident, the restarts by class, the
  // time this node's workers ran (productive) since the agent started.
  std::optional<incident> incident_;
  std::map<std::string, std::uint64_t> restarts_by_class_;
  std::chrono::steady_clock::time_point agent_started_ = env_.steady_now();
  std::optional<std::chrono::steady_clock::time_point> running_since_;
  std::chrono::steady_clock::duration productive_{};
  std::chrono::milliseconds hang_idle_{0};  // the last hang's idle time
  // --oom evidence: the OOM kills in this node's memory cgroup when the
  // round's workers started (oom_count.h).
  std::optional<std::uint64_t> oom_kills_at_start_;
  // --progress-file: failed rounds in a row without a new step.
  std::optional<progress_tracker> progress_stalls_;
  std::string progress_problem_;  // the last warning, said once until it changes
  int hangs_ = 0;
  std::uint64_t rounds_ = 0;
  std::uint64_t failures_ = 0;
  int restarts_seen_ = 0;
  std::int64_t published_round_ = -1;
  std::string run_dir_;
  bool remove_run_dir_ = false;
  // Ctrl-C here: the job's stop was sent to the other nodes / is stored;
  // a finish that waits for it.
  bool job_stop_sent_ = false;
  bool job_stop_stored_ = false;
  std::optional<int> finish_pending_;
  bool error_file_named_ = false;  // a failed worker left an error file
  // Preemption (elastic_agent_preempt.cpp): the round whose checkpoint
  // our workers were sent (once per round), and this node going away:
  // its workers' time to save, then leaving with exit_preempted.
  std::int64_t checkpoint_round_ = -1;
  generation_timer preempt_timer_;
  // --preflight (elastic_agent_preflight.cpp): the check's deadline, when
  // it started, why this node has no figures (empty: it has), and the
  // last verdict (`dtrun status` shows it).
  generation_timer preflight_timer_{io_};
  std::chrono::steady_clock::time_point preflight_started_{};
  std::string preflight_problem_;
  std::optional<preflight_verdict> preflight_verdict_;

  phase phase_ = phase::starting;
  ticket ticket_ = 0;
  // Set when the workers start stopping (or a signal ends the agent
  // outside a round); cleared when a round's workers start.
  std::optional<stop_reason> stop_;
  std::optional<failure> failure_;
  std::optional<int> job_restarts_;
  bool unreported_ = false;  // the last failure's report never reached the rendezvous
  bool awaiting_restart_count_ = false;
  // The held failure's reason, to report when the round ends or the
  // departure bound passes (elastic_agent_hold.cpp); nullopt: none held.
  std::optional<records::round_record> held_;
  generation_timer hold_timer_{io_};
  int exit_code_ = 1;
};

}  // namespace dtrun::agent
