#include "agent/report/run_reporter.h"

#include <csignal>
#include <tuple>

#include <boost/asio/ip/host_name.hpp>
#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace {

using ojson = nlohmann::ordered_json;

std::string this_host() {
  boost::system::error_code ec;
  auto name = boost::asio::ip::host_name(ec);
  return ec ? std::string("unknown-host") : name;
}

ojson signal_field(int signal) { return signal != 0 ? ojson(signal_name(signal)) : ojson(nullptr); }

ojson failure_fields(const failure_record& r) {
  ojson j{{"round", r.round},         {"host", r.host},      {"node_rank", r.node_rank},
          {"local_rank", r.local_rank}, {"rank", r.rank},      {"pid", r.pid},
          {"exit_code", r.exit_code},  {"signal", signal_field(r.signal)},
          {"exit_time", iso8601_utc_ms(std::chrono::system_clock::time_point(
                            std::chrono::milliseconds(r.time_ms)))},
          {"message", r.message.empty() ? ojson(nullptr) : ojson(r.message)},
          {"error_file", r.error_file.empty() ? ojson(nullptr) : ojson(r.error_file)},
          {"class", r.failure_class},
          {"exception_type", r.exception_type.empty() ? ojson(nullptr) : ojson(r.exception_type)}};
  return j;
}

bool same_worker(const failure_record& a, const failure_record& b) {
  return std::tie(a.host, a.node_rank, a.rank, a.pid) == std::tie(b.host, b.node_rank, b.rank, b.pid);
}

}  // namespace

run_reporter::run_reporter(const report_options& options, agent_log::sink sink,
                           rendezvous::rendezvous_handler& rendezvous)
    : log_(options.level, std::move(sink)), rendezvous_(rendezvous), host_(this_host()) {
  if (!options.event_log.empty()) events_.open(options.event_log);
  events_.set_identity(ojson{{"host", host_}, {"agent_pid", static_cast<long>(::getpid())}});
}

void run_reporter::agent_started(ojson config) {
  ojson fields{{"version", DTRUN_VERSION}, {"run_id", rendezvous_.run_id()}};
  for (auto& [k, v] : config.items()) fields[k] = v;
  events_.emit("agent_started", fields);
}

void run_reporter::rendezvous_started() {
  rendezvous_start_ = std::chrono::steady_clock::now();
  std::int64_t after = current_round();
  events_.emit("rendezvous_started",
               ojson{{"after_round", after < 0 ? ojson(nullptr) : ojson(after)}});
}

void run_reporter::rendezvous_completed(const rendezvous::rendezvous_info& info, int first_rank) {
  round_info_ = &info;
  local_failures_.clear();
  stopped_ranks_.clear();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - rendezvous_start_)
                .count();
  int nproc = info.local_world_size;
  int world = info.world_size;
  events_.emit("rendezvous_completed",
               ojson{{"round", info.round},
                     {"group_rank", info.group_rank},
                     {"group_world_size", info.group_world_size},
                     {"ranks", ojson::array({first_rank, first_rank + nproc - 1})},
                     {"world_size", world},
                     {"master_addr", info.master_addr},
                     {"master_port", info.master_port},
                     {"duration_ms", ms}});
  log_.debug(fmt::format("rendezvous round {} completed in {} ms: node {} of {}, ranks {}..{}",
                         info.round, ms, info.group_rank, info.group_world_size, first_rank,
                         first_rank + nproc - 1));
}

void run_reporter::worker_started(int local_rank, int rank, long pid) {
  events_.emit("worker_started",
               ojson{{"round", current_round()},
                     {"local_rank", local_rank},
                     {"rank", rank},
                     {"pid", pid}});
  log_.debug(fmt::format("round {}: worker local_rank={} (rank {}) started, pid {}",
                         current_round(), local_rank, rank, pid));
}

std::optional<failure_record> run_reporter::worker_exited(const worker_exit& exit, bool stopping,
                                                          int stop_signal,
                                                          std::function<void()> published) {
  const auto& s = exit.status;
  events_.emit("worker_exited", ojson{{"round", exit.round},
                                      {"local_rank", exit.local_rank},
                                      {"rank", exit.rank},
                                      {"pid", exit.pid},
                                      {"exit_code", s.code},
                                      {"signal", signal_field(s.signal)},
                                      {"stopped_by_dtrun", stopping}});
  if (s.ok()) {
    if (stopping) stopped_ranks_.push_back(exit.rank);
    return std::nullopt;
  }
  failure_record record = make_failure_record(exit);
  if (stopping) {
    // dtrun's own stop signals (and what a worker does on them) are not
    // failures; a worker that recorded an exception, or died of another
    // signal, failed on its own.
    bool our_signal = s.signal == SIGTERM || s.signal == SIGKILL || s.signal == SIGCONT ||
                      (stop_signal != 0 && s.signal == stop_signal);
    bool failed_on_its_own = !record.message.empty() || !record.watchdog.empty() ||
                             !record.hang.empty() ||
                             (s.signal != 0 && !our_signal);
    if (!failed_on_its_own) {
      stopped_ranks_.push_back(exit.rank);
      return std::nullopt;
    }
  }
  events_.emit("worker_failed", failure_fields(record));
  if (stopping) {
    log_.error(fmt::format("worker local_rank={} (rank {}, pid {}) also failed: {}{}",
                           exit.local_rank, exit.rank, exit.pid,
                           describe_exit(record.exit_code, record.signal),
                           record.message.empty() ? "" : ": " + printable(record.message)));
  }
  local_failures_.push_back(record);
  rendezvous_.publish_failure(record.round, to_json(record).dump(-1, ' ', false,
                                                                 nlohmann::json::error_handler_t::replace),
                              std::move(published));
  return record;
}

void run_reporter::hang_detected(nlohmann::ordered_json fields) {
  fields["round"] = current_round();
  events_.emit("hang_detected", std::move(fields));
}

void run_reporter::straggler(nlohmann::ordered_json fields) {
  fields["round"] = current_round();
  events_.emit("straggler", std::move(fields));
}

void run_reporter::restart(int count, int max) {
  events_.emit("restart", ojson{{"count", count}, {"max", max}, {"after_round", current_round()}});
}

void run_reporter::worker_unkillable(int local_rank, int rank, long pid, char state) {
  events_.emit("worker_unkillable", ojson{{"round", current_round()},
                                          {"local_rank", local_rank},
                                          {"rank", rank},
                                          {"pid", pid},
                                          {"state", std::string(1, state)}});
}

void run_reporter::group_stopping(std::string_view reason) {
  events_.emit("group_stopping",
               ojson{{"round", current_round()}, {"reason", std::string(reason)}});
}

void run_reporter::membership_change(const records::round_record& end) {
  events_.emit("membership_change", ojson{{"round", current_round()},
                                          {"reason", records::describe(end)},
                                          {"record", ojson::parse(records::to_text(end))}});
}

void run_reporter::node_health(const health_verdict& verdict, std::string_view when) {
  ojson findings = ojson::array();
  for (const auto& f : verdict.findings) {
    findings.push_back(ojson{{"check", f.check},
                             {"healthy", f.healthy},
                             {"gating", f.gating},
                             {"reason", f.reason.empty() ? ojson(nullptr) : ojson(f.reason)},
                             {"output_tail", f.output_tail},
                             {"repeated", f.repeated}});
  }
  events_.emit("node_health", ojson{{"round", current_round()},
                                    {"when", std::string(when)},
                                    {"healthy", verdict.healthy()},
                                    {"findings", std::move(findings)}});
}

void run_reporter::node_left(std::string_view reason) {
  events_.emit("node_left", ojson{{"round", current_round()}, {"reason", std::string(reason)}});
}

void run_reporter::checkpoint_requested(std::string_view by, std::string_view signal) {
  events_.emit("checkpoint_requested", ojson{{"round", current_round()},
                                             {"by", std::string(by)},
                                             {"signal", std::string(signal)}});
}

// Each named node's line rendered beside the typed verdict: `dtrun report`
// and people read the line, tools the fields.
void run_reporter::preflight(const preflight_verdict& verdict, std::string_view action) {
  ojson named = ojson::array();
  for (const auto& slow : verdict.slow) {
    named.push_back(ojson{{"node", slow.node},
                          {"host", slow.host},
                          {"figure", slow.figure},
                          {"value", slow.value},
                          {"median", slow.median},
                          {"leaves", slow.leaves},
                          {"line", describe(slow)}});
  }
  events_.emit("preflight", ojson{{"round", current_round()},
                                  {"action", std::string(action)},
                                  {"nodes", verdict.nodes},
                                  {"measured", verdict.measured},
                                  {"median_compute_s", verdict.median_compute_s
                                                           ? ojson(*verdict.median_compute_s)
                                                           : ojson(nullptr)},
                                  {"median_bandwidth_bps",
                                   verdict.median_bandwidth_bps
                                       ? ojson(*verdict.median_bandwidth_bps)
                                       : ojson(nullptr)},
                                  {"seconds", verdict.seconds},
                                  {"slow", std::move(named)},
                                  {"unmeasured", verdict.unmeasured},
                                  {"summary", summary_line(verdict)}});
}

void run_reporter::promoted(std::int64_t round, int group_rank) {
  events_.emit("promoted", ojson{{"round", round}, {"group_rank", group_rank}});
}

void run_reporter::quarantined(const quarantine_record& record) {
  events_.emit("quarantined", ojson{{"round", current_round()},
                                    {"machine", record.machine},
                                    {"quarantines", record.quarantines},
                                    {"cooldown_s", record.cooldown_s},
                                    {"until", iso8601_utc_ms(std::chrono::system_clock::time_point(
                                                  std::chrono::milliseconds(static_cast<
                                                      std::int64_t>(record.until * 1000))))},
                                    {"rank", record.rank < 0 ? ojson(nullptr) : ojson(record.rank)},
                                    {"fault", record.fault},
                                    {"reason", record.reason}});
}

void run_reporter::summarize_failure(std::int64_t round, summary_context context,
                                     std::function<void(int)> done) {
  rendezvous_.round_failures(round, [this, round, context = std::move(context), done](
                                        std::vector<std::string> texts, std::size_t total) mutable {
    std::vector<failure_record> failures;
    for (const auto& text : texts) {
      if (auto r = failure_from_json(text)) failures.push_back(std::move(*r));
    }
    // Ours, in case the store could not give them back.
    if (round == current_round()) {
      for (const auto& mine : local_failures_) {
        bool known = false;
        for (const auto& f : failures) known = known || same_worker(f, mine);
        if (!known) failures.push_back(mine);
      }
      context.stopped_ranks = stopped_ranks_;
    }
    context.this_host = host_;
    context.this_node_rank = current_node_rank();
    context.published = total;
    if (failures.empty()) {
      log_.error(fmt::format("job failed in round {} ({}); no failure report reached this node",
                             round, context.outcome));
      events_.emit("job_failed", ojson{{"round", round}, {"reason", context.outcome},
                                       {"root_cause", nullptr}});
      return done(1);
    }
    const failure_record& root = failures[root_cause_index(failures)];
    log_.block(format_summary(failures, context));
    events_.emit("job_failed", ojson{{"round", round},
                                     {"reason", context.outcome},
                                     {"failures", std::max(total, failures.size())},
                                     {"root_cause", failure_fields(root)}});
    // A record from the store may carry any number: only 1..255 is an
    // exit code (256 would read as success to the shell).
    done(root.exit_code > 0 && root.exit_code < 256 ? root.exit_code : 1);
  });
}

void run_reporter::rendezvous_failed(std::string_view reason) {
  events_.emit("rendezvous_failed", ojson{{"reason", std::string(reason)}});
}

void run_reporter::job_failed(std::string_view reason) {
  events_.emit("job_failed", ojson{{"round", current_round()}, {"reason", std::string(reason)},
                                   {"root_cause", nullptr}});
}

void run_reporter::job_succeeded() {
  events_.emit("job_succeeded", ojson{{"round", current_round()}});
}

void run_reporter::incident(nlohmann::ordered_json fields) {
  events_.emit("incident", fields);
}

void run_reporter::agent_exiting(int code) {
  events_.emit("agent_exiting", ojson{{"exit_code", code}});
}

}  // namespace dtrun::agent
