#include "agent/elastic_agent.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>

#include "agent/exit_status.h"
#include "agent/file_timer.h"
#include "agent/host_name_check.h"
#include "agent/job_monitor.h"
#include "agent/kill_watch.h"
#include "agent/orphan_guard.h"
#include "agent/progress_monitor.h"
#include "agent/python_hook.h"
#include "agent/stack_capture.h"
#include "agent/stack_dump.h"
#include "agent/stdin_watch.h"
#include "agent/wall_clock.h"
#include "agent/worker_output.h"
#include "agent/worker_process.h"
#include "rendezvous/base/generation_timer.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

struct worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = true;
  std::string error_file;
  bool exited = false;  // reaped; still `running` until its output is drained
  std::chrono::system_clock::time_point started_at{};
  std::optional<int> exit_code;  // once reaped
  // The file-timer watchdog sent it `watchdog_signal`: why, for the summary.
  int watchdog_signal = 0;
  std::string watchdog;
  // dtrun killed it after a hang (--hang-timeout): where it was stuck.
  std::string hang;
  // It outlived its SIGKILL by kill_watch's grace: no longer waited for
  // (not `running`), though not reaped either (not `exited`).
  bool unkillable = false;
};

// The first failure of a round: the root cause we report and exit with.
struct failure {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  exit_status status;
  std::string error_file;
  bool spawn_failed = false;  // exec() failed: restarting would not help
};

// exiting: our workers all succeeded; waiting in the exit barrier for the
// other nodes.
enum class phase { starting, rendezvous, running, stopping, exiting, done };

std::string safe_file_name(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "run" : out;
}

// <base>/<run_id>_XXXXXX, like torchrun's per-run log folder.
std::string make_run_dir(const std::string& base, const std::string& run_id) {
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("--log-dir: cannot create the folder {}: {}; give a "
                                         "folder you can write to",
                                         printable(base), ec.message()));
  }
  std::string pattern = (fs::path(base) / (safe_file_name(run_id) + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("cannot create a run folder in {}", base));
  }
  return pattern;
}

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

std::string temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

}  // namespace

class elastic_agent::impl {
 public:
  impl(asio::io_context& io, agent_options options, rendezvous::rendezvous_handler& rendezvous)
      : io_(io),
        options_(std::move(options)),
        rendezvous_(rendezvous),
        signals_(io),
        stop_timer_(io),
        kill_timer_(io),
        inherited_(current_environment()),
        reporter_(options_.report, log_sink(options_.log), rendezvous) {}

  ~impl() {
    std::error_code ignored;
    if (remove_run_dir_ && !run_dir_.empty()) fs::remove_all(run_dir_, ignored);
  }

  int run() {
    // Orphaned grandchildren come to us, so we can kill and reap them.
    become_subreaper();
    // Signals first: a worker that dies before we listen must not be
    // missed (its SIGCHLD would be), and Ctrl-C must reach this loop.
    signals_.add(SIGCHLD);
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
    guard_.emplace();
    // Hang detection must see the workers' output even where it would go
    // straight to the console.
    if (options_.hang_timeout.count() > 0) options_.logs.watch_console = true;
    output_.emplace(io_, options_.logs, [this](const std::string& line) { log_error(line); });
    bool writes_logs = options_.logs.writes_files(options_.spec.local_world_size);
    remove_run_dir_ = options_.log_dir.empty() && !writes_logs;
    run_dir_ = make_run_dir(options_.log_dir.empty() ? temp_base() : options_.log_dir,
                            rendezvous_.run_id());
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
        fs::remove(hook_dir_, ignored);
        fs::remove(run_dir_, ignored);
        throw;
      }
    }
    stacks_.emplace(io_);
    start_watchdog();
    start_hang_detection();
    start_monitor();
    reporter_.agent_started(config_summary());
    start_round();
    io_.run();
    return exit_code_;
  }

 private:
  void log(const std::string& line) { reporter_.log().info(line); }
  void log_error(const std::string& line) { reporter_.log().error(line); }
  void log_debug(const std::string& line) { reporter_.log().debug(line); }

  // dtrun --hosts: the launching dtrun forwards signals as lines on our
  // stdin, and its end-of-file means it is gone (ssh signals nothing), so
  // the workers are stopped as on SIGTERM; a second one (a signal line,
  // then EOF) kills them at once, as a second Ctrl-C does.
  void watch_launcher() {
    if (options_.control_fd < 0) return;
    stdin_watch::hooks hooks;
    hooks.on_signal = [this](int sig) {
      if (std::find(options_.signals.begin(), options_.signals.end(), sig) ==
          options_.signals.end()) {
        log_error(fmt::format("the launching dtrun sent {}, which is not handled here; ignored",
                              signal_name(sig)));
        return;
      }
      on_signal(sig);
    };
    hooks.on_eof = [this] {
      if (phase_ == phase::done) return;
      log("the launching dtrun is gone (its connection closed); stopping the workers");
      on_signal(SIGTERM);
    };
    hooks.on_junk = [this](const std::string& line) {
      log_error(fmt::format("ignoring a line from the launching dtrun: {}", printable(line)));
    };
    launcher_.emplace(io_, std::exchange(options_.control_fd, -1), std::move(hooks));
  }

  // TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file-timer watchdog, its
  // pipe at TORCHELASTIC_TIMER_FILE or in this run's own folder.
  void start_watchdog() {
    auto config = file_timer_from_env(inherited_);
    if (!config.enabled) return;
    std::string path =
        config.path.empty() ? (fs::path(run_dir_) / "watchdog_timer").string() : config.path;
    file_timer::hooks hooks;
    hooks.is_worker = [this](pid_t pid) { return live_worker(pid) != nullptr; };
    hooks.expire = [this](const timer_table::expired& e) { watchdog_expired(e); };
    hooks.error = [this](const std::string& line) { log_error(line); };
    hooks.debug = [this](const std::string& line) { log_debug(line); };
    hooks.request = [this](pid_t pid) {
      if (worker* w = live_worker(pid); w != nullptr && progress_) progress_->progress(w->local_rank);
    };
    watchdog_.emplace(io_, path, std::move(hooks));
    options_.spec.timer_file = path;
    log_debug(fmt::format("file-timer watchdog: reading {}", printable(path)));
  }

  // --hang-timeout: progress is output, heartbeat-file touches and
  // file-timer requests, shared across nodes through the rendezvous.
  void start_hang_detection() {
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
  void on_hang(std::chrono::milliseconds idle) {
    if (phase_ != phase::running) return;
    ++hangs_;
    double idle_s = static_cast<double>(idle.count()) / 1000.0;
    log_error(fmt::format("hang: no progress from any worker for {:.1f} s (--hang-timeout={:g}); "
                          "capturing every worker's stacks",
                          idle_s, static_cast<double>(options_.hang_timeout.count()) / 1000.0));
    // A capture outlives its round (its Python deadline, eu-stack): a
    // worker that failed meanwhile may have restarted the group, and the
    // new round's workers are not the ones that hung.
    capture_hang_stacks([this, idle_s, group = rounds_](hang_report report) {
      // A worker failed, a signal came or the group restarted meanwhile.
      if (phase_ != phase::running || group != rounds_) return;
      for (const auto& line : report.summary_lines) log_error(line);
      nlohmann::ordered_json stuck = nlohmann::ordered_json::array();
      for (const auto& w : workers_) {
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
      for (auto& w : workers_) {
        if (!w.running || w.exited || report.culprits.count(w.local_rank) == 0) continue;
        auto where = report.where.find(w.local_rank);
        auto file = report.files.find(w.local_rank);
        w.watchdog_signal = SIGKILL;
        w.hang = fmt::format("no progress from any worker for {:.1f} s{}{}", idle_s,
                             where == report.where.end() || where->second.empty()
                                 ? std::string()
                                 : "; it was in " + where->second,
                             file == report.files.end() ? std::string()
                                                        : "; stacks: " + file->second);
        ::kill(w.pid, SIGKILL);
        watch_kill(w.pid);
      }
    });
  }

  struct hang_report {
    std::vector<std::string> summary_lines;
    std::map<int, std::string> where;  // local rank -> "load_batch (train.py:42)"
    std::map<int, std::string> files;  // local rank -> its stacks file
    std::set<int> culprits;            // local ranks to kill first
  };

  // Every running worker's stacks, then the report: where each is, and
  // the culprits. Ranks are grouped by where their main thread is; the
  // smallest group is the one stuck apart (one data-loading rank while the
  // rest wait in a collective); between groups of one size, those stuck in
  // their own code rather than in a library's; all of them when that does
  // not decide.
  void capture_hang_stacks(std::function<void(hang_report)> done) {
    capture_stacks([this, done = std::move(done)](const std::vector<captured_stack>& stacks) {
      hang_report report;
      std::vector<rank_stack> ranks;
      std::map<std::string, std::vector<const captured_stack*>> groups;
      for (const auto& c : stacks) {
        if (c.exited) continue;
        rank_stack r = c.summary();
        ranks.push_back(r);
        std::string at = stuck_at(r);
        report.where[c.local_rank] = at;
        if (!c.error.empty()) log_error(c.error);
        groups[at].push_back(&c);
      }
      for (const auto& w : workers_) {
        report.files[w.local_rank] = stacks_file(w.local_rank);
      }
      if (!ranks.empty()) {
        report.summary_lines.push_back(
            fmt::format("hang summary (where each rank's main thread is; stacks in {}):",
                        printable(stacks_file(-1))));
        std::string text = hang_summary(ranks);
        std::size_t start = 0;
        while (start < text.size()) {
          std::size_t end = text.find('\n', start);
          if (end == std::string::npos) end = text.size();
          report.summary_lines.push_back("  " + text.substr(start, end - start));
          start = end + 1;
        }
      }
      auto in_own_code = [](const captured_stack* c) {
        return c->innermost && is_user_file(c->innermost->file);
      };
      std::size_t smallest = SIZE_MAX;
      for (const auto& g : groups) smallest = std::min(smallest, g.second.size());
      std::vector<const std::vector<const captured_stack*>*> chosen;
      for (const auto& g : groups) {
        if (g.second.size() == smallest) chosen.push_back(&g.second);
      }
      if (groups.size() > 1 && chosen.size() > 1) {
        decltype(chosen) own;
        for (auto* g : chosen) {
          if (in_own_code(g->front())) own.push_back(g);
        }
        if (!own.empty() && own.size() < chosen.size()) chosen = own;
      }
      // Every group is one place: nobody stands apart, everyone is a culprit.
      bool apart = groups.size() > 1 && chosen.size() < groups.size();
      for (const auto& w : workers_) {
        if (!apart && w.running && !w.exited) report.culprits.insert(w.local_rank);
      }
      if (apart) {
        for (auto* g : chosen) {
          for (const auto* c : *g) report.culprits.insert(c->local_rank);
        }
      }
      if (report.culprits.empty()) {  // no stack at all: every live worker
        for (const auto& w : workers_) {
          if (w.running && !w.exited) report.culprits.insert(w.local_rank);
        }
      }
      done(std::move(report));
    });
  }

  // <attempt dir>/<local rank>/stacks-<n>.txt of the current capture; for
  // local_rank -1 the pattern, for messages.
  std::string stacks_file(int local_rank) const {
    fs::path attempt = fs::path(run_dir_) / fmt::format("attempt_{}", round_);
    std::string name = fmt::format("stacks-{}.txt", captures_);
    if (local_rank < 0) return (attempt / "<local_rank>" / name).string();
    return (attempt / std::to_string(local_rank) / name).string();
  }

  // Captures every running worker's stacks; requests that come while one
  // is under way share its result.
  void capture_stacks(std::function<void(const std::vector<captured_stack>&)> done) {
    capture_waiters_.push_back(std::move(done));
    if (stacks_->busy()) return;
    ++captures_;
    std::vector<capture_target> targets;
    for (const auto& w : workers_) {
      if (!w.running || w.exited) continue;
      fs::path rank_dir = fs::path(w.error_file).parent_path();
      targets.push_back({w.local_rank, w.rank, w.pid,
                         hook_dir_.empty() ? std::string()
                                           : (rank_dir / "python_stacks.log").string(),
                         stacks_file(w.local_rank)});
    }
    stacks_->capture(std::move(targets), [this](std::vector<captured_stack> stacks) {
      if (!stacks.empty()) stacks_written_ = true;  // the stacks-<n>.txt files dtrun names
      auto waiters = std::move(capture_waiters_);
      capture_waiters_.clear();
      for (auto& waiter : waiters) waiter(stacks);
    });
  }

  // `dtrun status`, `dtrun stacks`, --metrics-port, and the status a node
  // of a multi-node job publishes.
  void start_monitor() {
    job_monitor::options opts;
    opts.metrics_port = options_.metrics_port;
    opts.metrics_host = options_.metrics_host;
    opts.control_socket = options_.control_socket;
    job_monitor::hooks hooks;
    hooks.facts = [this] { return facts(); };
    hooks.stacks = [this](control_socket::respond_fn respond) { stacks_on_request(std::move(respond)); };
    hooks.publish = [this](std::string status) {
      rendezvous_.publish_status(std::move(status), [this, round = round_] {
        if (published_round_ == round) return;
        published_round_ = round;  // said once per round: tests wait for it
        log_debug(fmt::format("round {}: status published to the store", round));
      });
    };
    hooks.info = [this](const std::string& line) { log(line); };
    hooks.warn = [this](const std::string& line) { log(fmt::format("warning: {}", line)); };
    hooks.debug = [this](const std::string& line) { log_debug(line); };
    monitor_.emplace(io_, std::move(opts), std::move(hooks));
  }

  agent_facts facts() const {
    agent_facts f;
    f.run_id = rendezvous_.run_id();
    f.host = reporter_.host();
    f.round = round_;
    f.restarts_used = job_restarts_.value_or(restarts_seen_);
    f.max_restarts = options_.spec.max_restarts;
    f.node_rank = node_rank_;
    f.nnodes = nnodes_;
    f.phase = phase_name();
    f.hangs = static_cast<std::uint64_t>(hangs_);
    f.failures = failures_;
    f.rounds = rounds_;
    auto now = std::chrono::steady_clock::now();
    for (const auto& w : workers_) {
      agent_facts::worker fw;
      fw.rank = w.rank;
      fw.local_rank = w.local_rank;
      fw.pid = w.pid;
      fw.state = w.exited ? "exited" : phase_ == phase::stopping ? "stopping" : "running";
      fw.exit_code = w.exit_code;
      fw.started_at = std::chrono::duration<double>(w.started_at.time_since_epoch()).count();
      if (progress_ && sees_output(w.local_rank)) {
        if (auto last = progress_->last_progress(w.local_rank)) {
          fw.seconds_since_output = std::chrono::duration<double>(now - *last).count();
        }
      }
      if (sees_output(w.local_rank)) {
        // Without --hang-timeout (no progress monitor), from the output
        // itself, as the docs promise under --tee and --redirects.
        if (!fw.seconds_since_output) {
          fw.seconds_since_output = output_->seconds_since_output(w.local_rank);
        }
        fw.last_output = output_->last_line(w.local_rank);
      }
      f.workers.push_back(fw);
    }
    return f;
  }

  // Whether the agent sees local_rank's output (a pipe or a log file).
  bool sees_output(int local_rank) const {
    auto routes = options_.logs.routes(local_rank);
    auto seen = [](stream_route r) {
      return r != stream_route::console && r != stream_route::discard;
    };
    return seen(routes.out) || seen(routes.err);
  }

  std::string phase_name() const {
    switch (phase_) {
      case phase::starting: return "starting";
      case phase::rendezvous: return "rendezvous";
      case phase::running: return "running";
      case phase::stopping: return "stopping";
      case phase::exiting: return "exiting";
      case phase::done: return exit_code_ == 0 ? "succeeded" : "failed";
    }
    return "unknown";
  }

  // `dtrun stacks`: every running worker's stacks, without stopping them.
  void stacks_on_request(control_socket::respond_fn respond) {
    if (phase_ != phase::running || running_count() == 0) {
      respond({{"ok", false}, {"error", fmt::format("no running workers (the agent is {})",
                                                    phase_name())}});
      return;
    }
    capture_stacks([this, respond](const std::vector<captured_stack>& stacks) {
      std::vector<rank_stack> ranks;
      nlohmann::ordered_json files = nlohmann::ordered_json::array();
      for (const auto& c : stacks) {
        if (c.exited) continue;
        ranks.push_back(c.summary());
        files.push_back(stacks_file(c.local_rank));
      }
      respond({{"ok", true},
               {"summary", hang_summary(ranks)},
               {"files", files},
               {"host", reporter_.host()},
               {"node_rank", node_rank_}});
    });
  }

  // A worker not yet reaped (so its pid cannot have been reused), or null.
  worker* live_worker(pid_t pid) {
    auto it = std::find_if(workers_.begin(), workers_.end(), [pid](const worker& w) {
      return w.pid == pid && w.running && !w.exited;
    });
    return it == workers_.end() ? nullptr : &*it;
  }

  void watchdog_expired(const timer_table::expired& e) {
    worker* w = live_worker(e.pid);
    if (w == nullptr) return;
    double late = wall_clock_seconds() - e.expiration_time;
    w->watchdog_signal = e.signal;
    w->watchdog = fmt::format("deadline of scope {} passed {:.1f} s ago; {} sent",
                              printable(e.scope_id), std::max(late, 0.0), signal_name(e.signal));
    log_error(fmt::format("watchdog: worker local_rank={} (rank {}, pid {}): {}", w->local_rank,
                          w->rank, w->pid, w->watchdog));
    // The worker alone, as torch's server (os.kill): its process group
    // follows when the agent stops the group.
    ::kill(w->pid, e.signal);
    if (e.signal == SIGKILL) watch_kill(w->pid);
  }

  nlohmann::ordered_json config_summary() const {
    return {{"role", options_.spec.role},
            {"nproc_per_node", options_.spec.local_world_size},
            {"max_restarts", options_.spec.max_restarts},
            {"program", options_.program},
            {"args", options_.args},
            {"stop_timeout_ms", options_.stop_timeout.count()},
            {"run_dir", run_dir_}};
  }

  // What failed, and the restarts, in the words of the summary's header.
  summary_context failure_context(std::string outcome) const {
    summary_context c;
    c.program = options_.script_name.empty() ? options_.program : options_.script_name;
    c.run_id = rendezvous_.run_id();
    c.outcome = std::move(outcome);
    return c;
  }

  void wait_for_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      wait_for_signal();  // re-arm first: coalesced signals are reaped in a loop
      if (sig == SIGCHLD) {
        reap();
      } else {
        on_signal(sig);
      }
    });
  }

  void start_round() {
    phase_ = phase::rendezvous;
    reporter_.rendezvous_started();
    rendezvous_.next_round([this](std::exception_ptr error, rendezvous::rendezvous_info info) {
      if (phase_ != phase::rendezvous) return;  // a signal ended the run meanwhile
      if (error) {
        try {
          std::rethrow_exception(error);
        } catch (const rendezvous::job_stopped_error& e) {
          stopped_elsewhere(e.who);
          return;
        } catch (const rendezvous::job_failed_error& e) {
          log_error(e.what());
          auto outcome = fmt::format("failed on another node, --max-restarts={} used up",
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
      start_workers(info);
    });
  }

  void start_workers(const rendezvous::rendezvous_info& info) {
    phase_ = phase::running;
    workers_.clear();
    failure_.reset();
    job_restarts_.reset();
    round_over_ = false;
    // TORCHELASTIC_RESTART_COUNT is the round: the same on every node, and
    // new for every restart of the group, whatever its cause, so workers
    // that bootstrap from the agent store never meet a previous round's keys.
    round_ = static_cast<int>(info.round);
    node_rank_ = info.group_rank;
    nnodes_ = info.group_world_size;
    ++rounds_;
    if (progress_) progress_->start_round();
    reporter_.rendezvous_completed(info, global_rank(info, 0));
    const auto& spec = options_.spec;
    if (info.group_world_size > 1) {
      int first = global_rank(info, 0);
      log(fmt::format("round {}: node {} of {}, starting {} worker(s) as ranks {}..{}",
                      info.round, info.group_rank, info.group_world_size,
                      spec.local_world_size, first, first + spec.local_world_size - 1));
    }
    if (!host_name_checked_ &&
        host_name_check_applies(info.group_world_size, info.store_host, inherited_)) {
      host_name_checked_ = true;
      check_host_name(io_, [this](const std::string& line) { log(fmt::format("warning: {}", line)); });
    }
    fs::path attempt_dir = fs::path(run_dir_) / fmt::format("attempt_{}", round_);
    for (int local_rank = 0; local_rank < spec.local_world_size; ++local_rank) {
      fs::path rank_dir = attempt_dir / std::to_string(local_rank);
      fs::create_directories(rank_dir);
      std::string error_file = (rank_dir / "error.json").string();
      // What we read after a failure must be this worker's (torch's @record
      // overwrites, but a worker that fails without it must not inherit one).
      std::error_code stale;
      fs::remove(error_file, stale);

      spawn_request request{options_.program, options_.args, inherited_};
      if (!hook_dir_.empty()) {
        add_python_hook_env(request.env, hook_dir_, (rank_dir / "python_stacks.log").string());
      }
      if (progress_) {
        // Touching it (any write, or its times set) is progress.
        request.env["DTRUN_HEARTBEAT_FILE"] = (rank_dir / "heartbeat").string();
        progress_->watch_rank_dir(local_rank, rank_dir.string(), "heartbeat");
      }
      for (auto& [k, v] : static_worker_env(spec, local_rank, inherited_)) request.env[k] = v;
      for (auto& [k, v] : round_worker_env(spec, info, local_rank, round_)) {
        request.env[k] = v;
      }
      request.env["TORCHELASTIC_ERROR_FILE"] = error_file;
      customize_worker(options_.worker_args, request.args, request.env);

      int rank = global_rank(info, local_rank);
      child_stdio stdio = output_->prepare(
          local_rank, rank_dir.string(),
          line_prefix(options_.logs.line_prefix_template,
                      {spec.role, rank, local_rank, static_cast<int>(info.group_rank), round_}));
      request.stdout_fd = stdio.out;
      request.stderr_fd = stdio.err;
      if (static_cast<std::size_t>(local_rank) < options_.worker_cpus.size()) {
        request.cpus = options_.worker_cpus[static_cast<std::size_t>(local_rank)];
      }
      spawn_result spawned = spawn_worker(request);
      output_->spawned(local_rank);
      if (!spawned.ok()) {
        log_error(spawned.error);
        reporter_.group_stopping(spawned.error);
        failure_ = failure{local_rank, rank, -1, {spawned.exit_code, 0}, {}, true};
        count_restart(spawned.error);
        begin_stop(SIGTERM);
        return;
      }
      guard_->watch(spawned.pid);
      reporter_.worker_started(local_rank, rank, spawned.pid);
      worker started{local_rank, rank, spawned.pid, true, error_file};
      started.started_at = std::chrono::system_clock::now();
      workers_.push_back(std::move(started));
    }
    if (monitor_ && info.group_world_size > 1) monitor_->start_publishing();
    // Another node failed, died or wants in: stop ours and meet again.
    rendezvous_.watch_round([this](std::string reason) {
      if (phase_ != phase::running && phase_ != phase::exiting) return;
      const std::string stopped = rendezvous::job_stopped_prefix;
      if (reason.rfind(stopped, 0) == 0) return stopped_elsewhere(reason.substr(stopped.size()));
      log(fmt::format("the group must restart: {}; stopping the workers to rejoin", reason));
      reporter_.membership_change(reason);
      round_over_ = true;
      if (phase_ == phase::exiting) {
        start_round();
        return;
      }
      begin_stop(SIGTERM);
    });
  }

  // waitpid(-1) in a loop: SIGCHLDs coalesce, and adopted orphans are
  // reaped here too (they are simply not in workers_).
  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;
      auto it = std::find_if(workers_.begin(), workers_.end(), [pid](const worker& w) {
        return w.pid == pid && w.running && !w.exited;
      });
      if (it == workers_.end()) continue;
      it->exited = true;
      it->exit_code = decode_wait_status(status).code;
      kills_.forget(pid);
      if (watchdog_) watchdog_->forget(pid);
      // Its last lines come before the agent reacts to its exit (at once
      // when its output is not piped through the agent).
      // The exit time is taken now: the root cause is chosen by it, and
      // draining the worker's output may take a moment.
      output_->when_drained(it->local_rank, [this, pid, ended = decode_wait_status(status),
                                             at = std::chrono::system_clock::now()] {
        auto w = std::find_if(workers_.begin(), workers_.end(),
                              [pid](const worker& x) { return x.pid == pid && x.running; });
        if (w == workers_.end()) return;
        w->running = false;
        on_worker_exit(*w, ended, at);
      });
    }
  }

  void on_worker_exit(const worker& w, const exit_status& status,
                      std::chrono::system_clock::time_point exited_at) {
    auto record = reporter_.worker_exited(
        worker_exit{round_, reporter_.host(), node_rank_, w.local_rank, w.rank, w.pid, status,
                    exited_at, w.error_file, fs::path(w.error_file).parent_path().string(),
                    w.watchdog_signal != 0 && status.signal == w.watchdog_signal && w.hang.empty()
                        ? w.watchdog
                        : std::string(),
                    w.watchdog_signal != 0 && status.signal == w.watchdog_signal ? w.hang
                                                                                 : std::string(),
                    options_.interpreter},
        phase_ == phase::stopping, stop_signal_, [] {});
    if (record && !record->error_file.empty()) error_file_named_ = true;
    if (phase_ == phase::running) {
      if (!status.ok()) {
        std::string why = record && !record->message.empty() ? ": " + record->message : "";
        log_error(fmt::format("worker local_rank={} (rank {}, pid {}) {}{}; stopping the other workers",
                              w.local_rank, w.rank, w.pid, describe(status), why));
        reporter_.group_stopping(fmt::format("worker rank {} {}", w.rank, describe(status)));
        failure_ = failure{w.local_rank, w.rank, w.pid, status, w.error_file, false};
        ++failures_;
        count_restart(fmt::format("worker rank {} {}", w.rank, describe(status)));
        begin_stop(SIGTERM);
      } else if (running_count() == 0) {
        end_round();
        exit_barrier();
      }
    } else if (phase_ == phase::stopping && running_count() == 0) {
      group_stopped();
    }
  }

  void on_signal(int sig) {
    if (sig == SIGUSR1 || sig == SIGUSR2) {  // a notice for the workers, not a stop
      log(fmt::format("received {}; forwarding it to the workers", signal_name(sig)));
      signal_workers(sig);
      return;
    }
    // Ctrl-C is a person stopping the job: every node stops, not just this
    // one (docs/agent.md, "Signals on several nodes"). Other signals make
    // this node leave, as torchrun's.
    if (sig == SIGINT && phase_ != phase::done && !job_stop_sent_) stop_the_job(sig);
    switch (phase_) {
      case phase::running:
        stop_signal_ = sig;
        log(fmt::format("received {}; forwarding it to the workers and stopping them", signal_name(sig)));
        reporter_.group_stopping(fmt::format("received {}", signal_name(sig)));
        begin_stop(sig);
        break;
      case phase::stopping:
        if (stop_signal_ != 0 && !stopped_elsewhere_) {
          // A second Ctrl-C means "now".
          log(fmt::format("received {} again; killing the workers", signal_name(sig)));
          signal_workers(SIGKILL);
        } else {
          // Already stopping after a failure or for a new round: no
          // restart any more, and the user sees that the signal arrived.
          log(fmt::format("received {}; forwarding it to the stopping workers and exiting "
                          "after them",
                          signal_name(sig)));
          stop_signal_ = sig;
          stopped_elsewhere_ = false;  // the next one here means "now"
          signal_workers(sig);
        }
        break;
      case phase::starting:
      case phase::rendezvous:
      case phase::exiting:
        log(fmt::format("received {}; exiting", signal_name(sig)));
        stop_signal_ = sig;
        finish_after_job_stop(128 + sig);
        break;
      case phase::done:
        break;
    }
  }

  // Tells every other node that a person stopped the job here; finishing
  // waits until the store has it (finish_after_job_stop), so the store's
  // host does not close the store first.
  void stop_the_job(int sig) {
    job_stop_sent_ = true;
    job_stop_stored_ = false;
    rendezvous_.stop_job(fmt::format("by {} (Ctrl-C there)", signal_name(sig)), [this] {
      job_stop_stored_ = true;
      if (finish_pending_) finish(*std::exchange(finish_pending_, std::nullopt));
    });
  }

  void finish_after_job_stop(int code) {
    if (job_stop_sent_ && !job_stop_stored_) {
      finish_pending_ = code;
      return;
    }
    finish(code);
  }

  // Another node's Ctrl-C ended the job: stop ours and exit as it did.
  void stopped_elsewhere(const std::string& who) {
    log(fmt::format("the job was stopped on {}; stopping the workers", printable(who)));
    reporter_.group_stopping(fmt::format("stopped on {}", who));
    stop_signal_ = SIGINT;
    stopped_elsewhere_ = true;  // not this node's Ctrl-C: a signal here is not a second one
    // Finishing waits until the store counts us in (finish_after_job_stop):
    // the node that stopped the job keeps the store for us until then.
    job_stop_sent_ = true;
    job_stop_stored_ = false;
    rendezvous_.stop_seen([this] {
      job_stop_stored_ = true;
      if (finish_pending_) finish(*std::exchange(finish_pending_, std::nullopt));
    });
    // The workers get the Ctrl-C itself, as the stopped node's do: one
    // signal for the whole job, whichever reaches this node first (with
    // --hosts the launcher also forwards the SIGINT to every host, and the
    // store's word may come before it).
    if (phase_ == phase::running) {
      begin_stop(SIGINT);
    } else {
      finish_after_job_stop(128 + SIGINT);
    }
  }

  // The first half of the two-phase stop: `sig` (and SIGCONT, so stopped
  // workers can act on it) now, SIGKILL when the grace period ends.
  void begin_stop(int sig) {
    phase_ = phase::stopping;
    if (progress_) progress_->stop();
    signal_workers(sig);
    if (sig != SIGKILL) signal_workers(SIGCONT);
    if (running_count() == 0) {
      group_stopped();
      return;
    }
    // Only this stop's grace period (generation_timer): an expiry queued
    // before cancel_stop_timer() must not SIGKILL the workers of a later
    // stop before their grace.
    stop_timer_.arm_after(options_.stop_timeout, [this] {
      if (phase_ != phase::stopping) return;
      log(fmt::format("workers still running {} ms after the stop signal; sending SIGKILL",
                      options_.stop_timeout.count()));
      signal_workers(SIGKILL);
    });
  }

  void signal_workers(int sig) {
    for (const auto& w : workers_) {
      if (!w.running || w.exited) continue;
      signal_worker(w.pid, sig);
      if (sig == SIGKILL) watch_kill(w.pid);
    }
  }

  // Every SIGKILL dtrun sends a worker gets a deadline (kill_watch): a
  // worker the kernel holds in uninterruptible sleep does not die of it,
  // and waiting for its exit would wedge the agent.
  void watch_kill(pid_t pid) {
    kills_.killed(pid, std::chrono::steady_clock::now());
    arm_kill_timer();
  }

  void arm_kill_timer() {
    if (auto deadline = kills_.next_deadline()) {
      kill_timer_.arm_at(*deadline, [this] { kills_overdue(); });
    } else {
      kill_timer_.cancel();
    }
  }

  // Workers still not reaped a grace after their SIGKILL: one line each
  // naming its state, and the agent stops waiting for them. A stop goes on
  // without them; a worker killed while the group ran (a hang's culprit,
  // the file-timer watchdog's SIGKILL) is this round's failure. Either way
  // the node then leaves the job (leave_unclean). Their exit, should it
  // ever come, is still reaped by reap() (waitpid(-1)).
  void kills_overdue() {
    worker* first = nullptr;
    for (pid_t pid : kills_.overdue(std::chrono::steady_clock::now())) {
      worker* w = live_worker(pid);
      if (w == nullptr) continue;
      char state = process_state(pid);
      log_error(unkillable_line(w->rank, w->pid, state, kills_.grace()));
      reporter_.worker_unkillable(w->local_rank, w->rank, w->pid, state);
      w->running = false;
      w->unkillable = true;
      if (!unkillable_) unkillable_ = fmt::format("rank {} (pid {})", w->rank, w->pid);
      if (first == nullptr) first = w;
    }
    arm_kill_timer();
    if (first == nullptr) return;
    if (phase_ == phase::running) {
      auto reason = fmt::format("worker rank {} did not die on SIGKILL", first->rank);
      reporter_.group_stopping(reason);
      failure_ = failure{first->local_rank, first->rank, first->pid, {128 + SIGKILL, SIGKILL},
                         first->error_file, false};
      ++failures_;
      count_restart(reason);
      begin_stop(SIGTERM);
    } else if (phase_ == phase::stopping && running_count() == 0) {
      group_stopped();
    }
  }

  std::size_t running_count() const {
    return static_cast<std::size_t>(
        std::count_if(workers_.begin(), workers_.end(), [](const worker& w) { return w.running; }));
  }

  // Every worker of the round has been reaped, or given up on
  // (kills_overdue).
  void group_stopped() {
    cancel_stop_timer();
    end_round();
    if (stop_signal_ != 0) {
      finish_after_job_stop(128 + stop_signal_);
      return;
    }
    if (unkillable_) {
      leave_unclean();
      return;
    }
    if (!failure_ && round_over_) {
      // Membership changed (or another node failed): not our restart.
      start_round();
      return;
    }
    if (!failure_) {  // cannot happen: a stop has a signal, a failure or a new round
      finish(1);
      return;
    }
    if (!job_restarts_) {
      awaiting_restart_count_ = true;  // decide_restart() runs when it comes
      return;
    }
    decide_restart();
  }

  // A failure ends the round on every node at once and counts one restart
  // for the whole job (the rendezvous keeps the count), so every node
  // honours --max-restarts alike.
  void count_restart(const std::string& reason) {
    awaiting_restart_count_ = false;
    rendezvous_.report_failure(reason, [this](std::exception_ptr error, int restarts) {
      // The agent may have finished meanwhile (a signal, or shutdown()
      // failing this call): nothing to decide any more.
      if (phase_ == phase::done) return;
      if (error) {
        log_error("could not reach the rendezvous to report the failure; not restarting");
        // The count is unknown, not used up: the summary must say so
        // (it said "all N restart(s) used" with none spent; scripts/chaos
        // seeds 52 and 69, a link down while a worker failed).
        unreported_ = true;
        job_restarts_ = options_.spec.max_restarts + 1;
      } else {
        job_restarts_ = restarts;
        restarts_seen_ = restarts;
      }
      if (awaiting_restart_count_) {
        awaiting_restart_count_ = false;
        decide_restart();
      }
    });
  }

  void decide_restart() {
    if (stop_signal_ != 0) {  // a signal came while we waited for the count
      finish_after_job_stop(128 + stop_signal_);
      return;
    }
    int restarts = *job_restarts_;
    if (!failure_->spawn_failed && restarts <= options_.spec.max_restarts) {
      log(fmt::format("restarting the workers (restart {} of {})", restarts,
                      options_.spec.max_restarts));
      reporter_.restart(restarts, options_.spec.max_restarts);
      start_round();
      return;
    }
    // Tell the other nodes the job is over, so they do not wait for us;
    // then every node's failures of this round are in the store.
    int code = failure_->status.code;
    bool said_why = failure_->spawn_failed;  // in one line already
    std::string outcome =
        unreported_ ? std::string("the failure could not be reported to the rendezvous, so no "
                                  "restart could be counted")
        : options_.spec.max_restarts == 0
            ? std::string("no restarts allowed: --max-restarts=0")
            : fmt::format("all {} restart(s) used", options_.spec.max_restarts);
    rendezvous_.fail_job(
        fmt::format("worker rank {} {}", failure_->rank, describe(failure_->status)),
        [this, code, said_why, outcome] {
          if (phase_ == phase::done) return;  // finished meanwhile
          if (said_why) {
            reporter_.job_failed(outcome);
            return finish(code);
          }
          reporter_.summarize_failure(round_, failure_context(outcome),
                                      [this, code](int) { finish(code); });
        });
  }

  // A worker of this node outlived SIGKILL and still holds what it held
  // (GPU memory, ports, files): a new round here would start beside it and
  // most likely fail the same way, spending the job's restarts on a node
  // that cannot clean up (pytorch PR #185414). So this node leaves the job
  // with a failure instead, whatever restarts remain; the other nodes see
  // it leave as any node loss (its will), and go on without it where
  // --nnodes=MIN:MAX allows. Nothing more is counted: a failure of ours
  // was counted when it happened.
  void leave_unclean() {
    auto outcome = fmt::format(
        "not restarted: {} did not die on SIGKILL, so this node cannot clean up and leaves the job",
        *unkillable_);
    if (!failure_) {
      log_error(fmt::format("{}; exiting with 1", outcome));
      reporter_.job_failed(outcome);
      return finish(1);
    }
    int code = failure_->status.code;
    reporter_.summarize_failure(round_, failure_context(outcome),
                                [this, code](int) { finish(code); });
  }

  // Our workers all succeeded. Nodes that host the store must not leave
  // the others without it, so everyone waits (bounded) for everyone; a
  // failure elsewhere meanwhile brings us back for the next round.
  void exit_barrier() {
    phase_ = phase::exiting;
    rendezvous_.finish([this](std::exception_ptr error) {
      if (phase_ != phase::exiting) return;
      if (error) return;  // the round is over: watch_round's callback rejoins
      reporter_.job_succeeded();
      finish(0);
    });
  }

  // Leaves nothing of the round behind: grandchildren still in a worker's
  // group, and orphans that left it (adopted by us as subreaper).
  void end_round() {
    if (progress_) progress_->stop();
    for (const auto& w : workers_) {
      signal_group(w.pid, SIGKILL);
      guard_->unwatch(w.pid);
    }
    kills_.clear();  // their groups are killed above; the rest is the kernel's
    kill_timer_.cancel();
    std::vector<pid_t> keep = stacks_->helper_pids();  // eu-stack: ends on its own
    keep.push_back(guard_->pid());
    kill_adopted_children(keep);
    output_->end_round();
    if (watchdog_) watchdog_->forget_all();
  }

  // Once: a completion that arrives after (shutdown() fails pending
  // rendezvous calls synchronously) must not change the exit code.
  void finish(int code) {
    if (phase_ == phase::done) return;
    phase_ = phase::done;
    exit_code_ = code;
    keep_named_files(code);
    reporter_.agent_exiting(code);
    cancel_stop_timer();
    kill_timer_.cancel();
    watchdog_.reset();  // closes and removes the pipe
    monitor_.reset();   // removes the control socket; closes the metrics port
    stacks_.reset();    // a capture under way: its eu-stack children are killed
    rendezvous_.shutdown();
    // The signal set stays installed until the agent is destroyed, so a
    // late Ctrl-C cannot kill the agent halfway through its teardown.
    io_.stop();
  }

  // Without --log-dir the run folder is temporary, but what dtrun named in
  // it must outlive dtrun: the stacks-<n>.txt files of a hang summary or of
  // `dtrun stacks`, and the error.json a failure summary shows.
  void keep_named_files(int code) {
    if (!remove_run_dir_ || run_dir_.empty()) return;
    const char* why = stacks_written_                  ? "it holds the stacks files dtrun named"
                      : code != 0 && error_file_named_ ? "it holds the error file named above"
                                                       : nullptr;
    if (why == nullptr) return;
    remove_run_dir_ = false;
    log(fmt::format("run folder: {} (kept: {}; choose the folder with --log-dir)",
                    printable(run_dir_), why));
  }

  void cancel_stop_timer() { stop_timer_.cancel(); }

  asio::io_context& io_;
  agent_options options_;
  rendezvous::rendezvous_handler& rendezvous_;
  asio::signal_set signals_;
  generation_timer stop_timer_;
  // The deadlines of the SIGKILLs sent to workers and their one timer.
  kill_watch kills_;
  generation_timer kill_timer_;
  env_map inherited_;
  // Whether this host's name was checked for gloo (host_name_check.h).
  bool host_name_checked_ = false;
  run_reporter reporter_;
  std::optional<orphan_guard> guard_;
  std::optional<stdin_watch> launcher_;  // dtrun --hosts: the pipe from the launcher
  std::optional<worker_output> output_;
  std::optional<file_timer> watchdog_;
  std::optional<progress_monitor> progress_;
  std::optional<job_monitor> monitor_;
  std::optional<stack_capture> stacks_;
  std::vector<std::function<void(const std::vector<captured_stack>&)>> capture_waiters_;
  int captures_ = 0;
  std::string hook_dir_;  // empty: no start-up hook
  int hangs_ = 0;
  int nnodes_ = 1;
  std::uint64_t rounds_ = 0;
  std::uint64_t failures_ = 0;
  int restarts_seen_ = 0;
  int published_round_ = -1;
  std::string run_dir_;
  bool remove_run_dir_ = false;
  // Ctrl-C here: the job's stop was sent to the other nodes / is stored;
  // a finish that waits for it.
  bool job_stop_sent_ = false;
  bool job_stop_stored_ = false;
  std::optional<int> finish_pending_;
  bool stopped_elsewhere_ = false;  // another node's Ctrl-C stopped the job
  bool stacks_written_ = false;    // a capture wrote stacks-<n>.txt files
  bool error_file_named_ = false;  // a failed worker left an error file

  phase phase_ = phase::starting;
  std::vector<worker> workers_;
  std::optional<failure> failure_;
  int stop_signal_ = 0;
  int round_ = 0;
  int node_rank_ = 0;
  bool round_over_ = false;
  std::optional<int> job_restarts_;
  bool unreported_ = false;  // the last failure's report never reached the rendezvous
  bool awaiting_restart_count_ = false;
  // "rank 3 (pid 1234)": the first worker that did not die on SIGKILL.
  std::optional<std::string> unkillable_;
  int exit_code_ = 1;
};

elastic_agent::elastic_agent(asio::io_context& io, agent_options options,
                             rendezvous::rendezvous_handler& rendezvous)
    : impl_(std::make_unique<impl>(io, std::move(options), rendezvous)) {}

elastic_agent::~elastic_agent() = default;

int elastic_agent::run() { return impl_->run(); }

}  // namespace dtrun::agent
