// Quarantine (docs/agent.md, "Quarantine"): a machine whose health check
// fails, or whose workers fail in ways that follow the machine (SIGBUS, an
// uncorrectable ECC error), --quarantine-after times in a row stays out
// of the job for a cooldown that doubles each time (elastic_agent_impl.h
// says which file holds what). Below that count an unhealthy node stays
// out and checks again; a healthy node rejoins as a newcomer.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/health/machine_identity.h"
#include "agent/spec/wall_clock.h"
#include "rendezvous/base/exit_codes.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  return fmt::format("{:g}", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

// A machine the job quarantined earlier (this agent was started again on
// it) waits out what is left of its cooldown first, on probation: its next
// failure quarantines it again.
void elastic_agent::impl::before_first_join() {
  if (!options_.quarantine.enabled()) return check_health_then_join();
  // The machine, not its name: a pod replaced under the same name on
  // another machine is not kept out (machine_identity.h).
  machine_key_ = options_.quarantine.machine_key.empty() ? this_machine_identity(env_.nvml()).key
                                                         : options_.quarantine.machine_key;
  rendezvous_.read_machine(machine_key_, [this](std::exception_ptr error, std::string text) {
    if (phase_ != phase::starting) return;
    // Unreadable: the join says why the store cannot be reached.
    if (error || text.empty()) return check_health_then_join();
    auto record = quarantine_record::parse(text);
    if (!record) {
      log(fmt::format("warning: ignoring this machine's quarantine record: it is not one ({})",
                      printable(text.substr(0, 200))));
      return check_health_then_join();
    }
    quarantines_ = record->quarantines;
    machine_failures_ = options_.quarantine.after - 1;
    double left = record->until - seconds_since_epoch(env_.wall_now());
    if (!(left > 0)) return check_health_then_join();
    // No record holds more than the longest cooldown (one from a bad clock
    // or another writer must not keep the machine out for ever).
    double longest = static_cast<double>(options_.quarantine.longest.count()) / 1000.0;
    auto wait = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(std::min(left, longest) * 1000)));
    log(fmt::format("this machine is in quarantine for {} s more ({}); waiting outside the job",
                    seconds_text(wait), record->reason));
    sit_out(wait);
  });
}

// One more machine failure in a row. Quarantined at --quarantine-after;
// below it the node stays out (leaving its round, if in one) and checks
// again after --node-health-check-interval.
void elastic_agent::impl::machine_failed(const std::string& reason, int rank,
                                         const std::string& fault) {
  ++machine_failures_;
  machine_failed_this_round_ = true;
  int after = options_.quarantine.after;
  if (machine_failures_ >= after) return enter_quarantine(reason, rank, fault);
  auto again = options_.health.interval.count() > 0 ? options_.health.interval
                                                    : options_.quarantine.cooldown;
  log(fmt::format("{}; this node stays out of the job and checks again in {} s ({} of {} "
                  "failures in a row before quarantine)",
                  reason, seconds_text(again), machine_failures_, after));
  rendezvous_.leave_job(records::leaving(failure_class::health, reason),
                        [this, again, t = current_ticket()] {
    if (!current(t) || signalled_meanwhile()) return;
    sit_out(again);
  });
}

// The record goes to the store (every node's `dtrun status` lists it, an
// agent started again on this machine finds it), the round ends as when a
// node leaves, and this node waits out the cooldown.
void elastic_agent::impl::enter_quarantine(const std::string& reason, int rank,
                                           const std::string& fault) {
  auto cooldown = next_cooldown(quarantines_, options_.quarantine.cooldown,
                                options_.quarantine.longest);
  ++quarantines_;
  quarantine_record record;
  record.machine = machine_key_;
  record.host = reporter_.host();
  record.quarantines = quarantines_;
  record.since = seconds_since_epoch(env_.wall_now());
  record.cooldown_s = static_cast<double>(cooldown.count()) / 1000.0;
  record.until = record.since + record.cooldown_s;
  record.reason = reason;
  record.rank = rank;
  record.fault = fault;
  log_error(fmt::format("{}; quarantining this machine for {} s ({} failure(s) in a row, "
                        "quarantine {} in this job)",
                        reason, seconds_text(cooldown), machine_failures_, quarantines_));
  reporter_.quarantined(record);
  auto why = fmt::format("quarantined for {} s: {}", seconds_text(cooldown), reason);
  rendezvous_.quarantine(record.machine, record.to_json(),
                         records::leaving(failure_class::health, why),
                         [this, cooldown, t = current_ticket()] {
    if (!current(t) || signalled_meanwhile()) return;
    write_quarantine_file();
    sit_out(cooldown);
  });
}

// Outside the job until `duration` passes, then a health check and a
// join as a newcomer; the job's end meanwhile ends this agent too.
void elastic_agent::impl::sit_out(std::chrono::milliseconds duration) {
  phase_ = phase::outside;
  rendezvous_.wait_outside(duration, [this](bool job_ended, std::string why) {
    // A signal ended the run meanwhile (its finish may wait for the store
    // to record a Ctrl-C, whose `ended` woke this wait): its code stands.
    if (phase_ != phase::outside || signalled()) return;
    if (job_ended) {
      log(fmt::format("{} while this node was out of it; exiting with {}", why,
                      exit_node_unhealthy));
      return finish(exit_node_unhealthy);
    }
    phase_ = phase::starting;
    check_health_then_join();
  });
}

// A worker's failure that follows the machine counts towards quarantine,
// unless the same rank's same fault already got another machine
// quarantined (it follows the rank). Calls `restart` when this node goes
// on with the job.
void elastic_agent::impl::judge_machine_fault(std::function<void()> restart) {
  if (!options_.quarantine.enabled() || !failure_ || failure_->machine_fault.empty()) {
    return restart();
  }
  int after = options_.quarantine.after;
  if (machine_failures_ + 1 < after) {
    ++machine_failures_;
    machine_failed_this_round_ = true;
    log(fmt::format("worker rank {} {} follows this machine ({} of {} in a row before "
                    "quarantine)",
                    failure_->rank, failure_->machine_fault, machine_failures_, after));
    return restart();
  }
  int rank = failure_->rank;
  auto fault = failure_->machine_fault;
  auto reason = fmt::format("worker rank {} {}", rank, describe(failure_->status));
  rendezvous_.quarantine_list([this, rank, fault, reason, restart, t = current_ticket()](
                                  std::vector<std::string> texts) {
    if (!current(t) || signalled_meanwhile()) return;
    if (follows_the_rank(parse_records(texts), machine_key_, rank, fault)) {
      log(fmt::format("rank {} failed with {} on another machine too: the failure follows the "
                      "rank, not this machine; not quarantining it",
                      rank, fault));
      return restart();
    }
    machine_failed(reason, rank, fault);
  });
}

// A signal that came while the workers were already stopped and the agent
// waited for the store: nothing is left to forward it to, so it ends the
// run here (on_signal's stopping case only records it).
bool elastic_agent::impl::signalled_meanwhile() {
  if (!signalled()) return false;
  finish_after_job_stop(128 + stop_signal(stop_));
  return true;
}

// --quarantine-file: the job's quarantined hosts for the next submission
// (Slurm's --exclude=<file>), written whole and renamed into place so a
// reader never sees half of it.
void elastic_agent::impl::write_quarantine_file() {
  const auto& path = options_.quarantine.file;
  if (path.empty()) return;
  rendezvous_.quarantine_list([this, path](std::vector<std::string> texts) {
    auto text = exclude_list(parse_records(texts));
    // Only a regular file is replaced: renamed over a device, a FIFO or a
    // link, it would replace that (as root, /dev/full became a file).
    std::error_code ec;
    auto status = fs::symlink_status(path, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
      log_error(fmt::format("could not write --quarantine-file {}: it is not a regular file; "
                            "name a file",
                            printable(path)));
      return;
    }
    ec.clear();
    auto temporary = fmt::format("{}.{}.tmp", path, ::getpid());
    {
      errno = 0;
      std::ofstream out(temporary, std::ios::trunc);
      if (!out) ec = std::error_code(errno != 0 ? errno : EIO, std::generic_category());
      out << text;
      if (!ec && !out.flush()) ec = std::error_code(errno != 0 ? errno : EIO,
                                                     std::generic_category());
    }
    if (!ec) fs::rename(temporary, path, ec);
    if (!ec) {
      log(fmt::format("--quarantine-file {}: {} host(s) kept out of this job", printable(path),
                      std::count(text.begin(), text.end(), '\n')));
    } else {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      log_error(fmt::format("could not write --quarantine-file {}: {}", printable(path),
                            ec.message()));
    }
  });
}

}  // namespace dtrun::agent
