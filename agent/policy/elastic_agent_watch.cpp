// What the agent watches besides the workers' exits: the file-timer
// watchdog (TORCHELASTIC_ENABLE_FILE_TIMER), hang detection
// (--hang-timeout), and the status it answers (`dtrun status`,
// `dtrun stacks`, --metrics-port).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/watch/hang_report.h"
#include "agent/watch/stack_dump.h"
#include "agent/spec/wall_clock.h"
#include "agent/monitor/worker_facts.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

// TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file-timer watchdog, its
// pipe at TORCHELASTIC_TIMER_FILE or in this run's own folder.
void elastic_agent::impl::start_watchdog() {
  auto config = file_timer_from_env(inherited_);
  if (!config.enabled) return;
  std::string path =
      config.path.empty() ? (fs::path(run_dir_) / "watchdog_timer").string() : config.path;
  file_timer::hooks hooks;
  hooks.is_worker = [this](pid_t pid) { return group_.live(pid) != nullptr; };
  hooks.expire = [this](const timer_table::expired& e) { watchdog_expired(e); };
  hooks.error = [this](const std::string& line) { log_error(line); };
  hooks.debug = [this](const std::string& line) { log_debug(line); };
  hooks.request = [this](pid_t pid) {
    if (worker* w = group_.live(pid); w != nullptr && progress_) progress_->progress(w->local_rank);
  };
  watchdog_.emplace(io_, path, std::move(hooks));
  timer_file_ = path;
  log_debug(fmt::format("file-timer watchdog: reading {}", printable(path)));
}

// --hang-timeout: progress is output, heartbeat-file touches and
// file-timer requests, shared across nodes through the rendezvous.
void elastic_agent::impl::start_hang_detection() {
  if (options_.hang_timeout.count() <= 0) return;
  progress_monitor::hooks hooks;
  hooks.share = [this](bool progressed, std::function<void(std::int64_t)> done) {
    rendezvous_.share_progress(progressed, std::move(done));
  };
  hooks.hang = [this](std::chrono::milliseconds idle) { on_hang(idle); };
  hooks.error = [this](const std::string& line) { log_error(line); };
  progress_.emplace(io_, options_.hang_timeout, std::move(hooks));
  output_->on_output([this](int local_rank) {
    if (progress_) progress_->progress(local_rank);
  });
}

// No worker of the job progressed for --hang-timeout: say where every
// worker of this node is, then fail the group as a worker failure would
// (restart while restarts remain). The ranks stuck somewhere the others
// are not are killed first, so the failure summary names them as the
// root cause; the others are stopped as after any failure.
void elastic_agent::impl::on_hang(std::chrono::milliseconds idle) {
  if (phase_ != phase::running) return;
  ++hangs_;
  hang_idle_ = idle;
  double idle_s = static_cast<double>(idle.count()) / 1000.0;
  log_error(fmt::format("hang: no progress from any worker for {:.1f} s (--hang-timeout={:g}); "
                        "capturing every worker's stacks",
                        idle_s, static_cast<double>(options_.hang_timeout.count()) / 1000.0));
  // A capture outlives its round (its Python deadline, eu-stack): a
  // worker that failed meanwhile may have restarted the group, and the
  // new round's workers are not the ones that hung.
  auto round = round_info_.round;
  stacks_->capture(group_.workers(), round, [this, idle_s, round, t = current_ticket()](
                                                const std::vector<captured_stack>& stacks) {
    auto reported = hang_report_of(stacks, round, t);
    if (!reported) return;
    const hang_report& report = *reported;
    nlohmann::ordered_json stuck = nlohmann::ordered_json::array();
    for (const auto& w : group_.workers()) {
      auto where = report.where.find(w.local_rank);
      stuck.push_back({{"rank", w.rank},
                       {"local_rank", w.local_rank},
                       {"pid", w.pid},
                       {"where", where == report.where.end() ? "" : where->second},
                       {"stacks", report.files.count(w.local_rank) > 0
                                      ? report.files.at(w.local_rank)
                                      : std::string()}});
    }
    reporter_.hang_detected({{"idle_s", idle_s},
                             {"hang_timeout_s",
                              static_cast<double>(options_.hang_timeout.count()) / 1000.0},
                             {"workers", stuck}});
    for (auto& w : group_.workers()) {
      if (!w.alive() || report.culprits.count(w.local_rank) == 0) continue;
      auto where = report.where.find(w.local_rank);
      auto file = report.files.find(w.local_rank);
      w.watchdog_signal = SIGKILL;
      w.hang = fmt::format("no progress from any worker for {:.1f} s{}{}", idle_s,
                           where == report.where.end() || where->second.empty()
                               ? std::string()
                               : "; it was in " + where->second,
                           file == report.files.end() ? std::string()
                                                      : "; stacks: " + file->second);
      group_.signal_one(w, SIGKILL);
    }
  });
}

// A hang's captured stacks: their errors said (even when the hang is moot
// by now), then the report, with its summary said; nullopt when a worker
// failed, a signal came or the group restarted meanwhile.
std::optional<hang_report> elastic_agent::impl::hang_report_of(
    const std::vector<captured_stack>& stacks, std::int64_t round, ticket t) {
  for (const auto& c : stacks) {
    if (!c.exited && !c.error.empty()) log_error(c.error);
  }
  if (!current(t) || phase_ != phase::running) return std::nullopt;
  hang_report report = make_hang_report(
      stacks, group_.workers(),
      [this, round](int local_rank) { return stacks_->file(round, local_rank); });
  for (const auto& line : report.summary_lines) log_error(line);
  return report;
}

// `dtrun status`, `dtrun stacks`, --metrics-port, and the status a node
// of a multi-node job publishes.
void elastic_agent::impl::start_monitor() {
  job_monitor::options opts;
  opts.metrics_port = options_.metrics_port;
  opts.metrics_host = options_.metrics_host;
  opts.control_socket = options_.control_socket;
  job_monitor::hooks hooks;
  hooks.facts = [this] { return facts(); };
  hooks.stacks = [this](control_socket::respond_fn respond) {
    stacks_on_request(std::move(respond));
  };
  hooks.census = [this](auto done) { rendezvous_.census(std::move(done)); };
  hooks.quarantine_list = [this](auto done) { rendezvous_.quarantine_list(std::move(done)); };
  hooks.publish = [this](std::string status) {
    rendezvous_.publish_status(std::move(status), [this, round = round_info_.round] {
      if (published_round_ == round) return;
      published_round_ = round;  // said once per round: tests wait for it
      log_debug(fmt::format("round {}: status published to the store", round));
    });
  };
  hooks.nvml = [this]() -> nvml_session& { return env_.nvml(); };
  hooks.info = [this](const std::string& line) { log(line); };
  hooks.warn = [this](const std::string& line) { log(fmt::format("warning: {}", line)); };
  hooks.debug = [this](const std::string& line) { log_debug(line); };
  monitor_.emplace(io_, std::move(opts), std::move(hooks));
}

job_status elastic_agent::impl::facts() const {
  job_status f;
  f.run_id = rendezvous_.run_id();
  f.host = reporter_.host();
  f.round = round_info_.round;
  f.restarts_used = job_restarts_.value_or(restarts_seen_);
  f.max_restarts = options_.spec.max_restarts;
  f.node_rank = round_info_.group_rank;
  f.nnodes = round_info_.group_world_size;
  f.phase = phase_name();
  f.preflight = preflight_verdict_;
  f.stragglers = stragglers_.verdict;
  for (const auto& finding : health_failing_) {
    f.health.push_back({round_info_.group_rank, finding.check, finding.reason, finding.gating,
                        finding.output_tail});
  }
  f.hangs_detected = static_cast<std::uint64_t>(hangs_);
  f.failures = failures_;
  f.rounds = rounds_;
  f.restarts_by_class = restarts_by_class_;
  auto productive = productive_;
  auto now = env_.steady_now();
  if (running_since_) productive += now - *running_since_;
  auto total = now - agent_started_;
  f.productive_seconds = std::chrono::duration<double>(productive).count();
  f.lost_seconds = std::max(0.0, std::chrono::duration<double>(total - productive).count());
  worker_progress_facts steps{&pages_, std::nullopt};
  if (!options_.progress_file.empty()) {
    std::string problem;  // said by the incidents' reads (read_step)
    steps.file_step = env_.progress_step(options_.progress_file, problem);
  }
  f.workers = worker_facts(group_.workers(), phase_ == phase::stopping, logs_,
                           progress_ ? &*progress_ : nullptr, *output_, steps);
  return f;
}

std::string elastic_agent::impl::phase_name() const {
  switch (phase_) {
    case phase::starting: return "starting";
    case phase::rendezvous: return "rendezvous";
    case phase::preflight: return "preflight";
    case phase::running: return "running";
    case phase::stopping: return "stopping";
    case phase::exiting: return "exiting";
    case phase::reclaiming: return "reclaiming";
    case phase::outside: return "outside";
    case phase::done: return exit_code_ == 0 ? "succeeded" : "failed";
  }
  return "unknown";
}

// `dtrun stacks`: every running worker's stacks, without stopping them.
void elastic_agent::impl::stacks_on_request(control_socket::respond_fn respond) {
  if (phase_ != phase::running || group_.waited_for() == 0) {
    respond({{"ok", false}, {"error", fmt::format("no running workers (the agent is {})",
                                                  phase_name())}});
    return;
  }
  auto round = round_info_.round;
  stacks_->capture(group_.workers(), round, [this, respond, round](
                                                const std::vector<captured_stack>& stacks) {
    std::vector<rank_stack> ranks;
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (const auto& c : stacks) {
      if (c.exited) continue;
      ranks.push_back(c.summary());
      files.push_back(stacks_->file(round, c.local_rank));
    }
    respond({{"ok", true},
             {"summary", hang_summary(ranks)},
             {"files", files},
             {"host", reporter_.host()},
             {"node_rank", round_info_.group_rank}});
  });
}

void elastic_agent::impl::watchdog_expired(const timer_table::expired& e) {
  worker* w = group_.live(e.pid);
  if (w == nullptr) return;
  double late = seconds_since_epoch(env_.wall_now()) - e.expiration_time;
  w->watchdog_signal = e.signal;
  w->watchdog = fmt::format("deadline of scope {} passed {:.1f} s ago; {} sent",
                            printable(e.scope_id), std::max(late, 0.0), signal_name(e.signal));
  log_error(fmt::format("watchdog: worker local_rank={} (rank {}, pid {}): {}", w->local_rank,
                        w->rank, w->pid, w->watchdog));
  // The worker alone, as torch's server (os.kill): its process group
  // follows when the agent stops the group.
  group_.signal_one(*w, e.signal);
}

}  // namespace dtrun::agent
