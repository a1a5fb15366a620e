#include "launcher/report/event_report.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "agent/watch/straggler_codec.h"
#include "launcher/report/event_report_impl.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {
namespace event_report_parts {
namespace {

// `where`: each cause's place in report.lost_s (a class is any text a log
// says: a million of them must not be a million squared steps).
void add_lost(job_report& report, std::map<std::string, std::size_t>& where,
              const std::string& cause, double seconds) {
  if (seconds <= 0) return;
  auto [it, fresh] = where.emplace(cause, report.lost_s.size());
  if (fresh) {
    report.lost_s.emplace_back(cause, seconds);
  } else {
    report.lost_s[it->second].second += seconds;
  }
}

// Productive time, and where the rest went: the gap before a round is put
// down to what ended the round before it.
void account_time(job_report& report) {
  double cursor = report.started_at;
  std::string cause = "start-up";
  std::map<std::string, std::size_t> where;
  auto advance_to = [&](double t) {
    if (t > cursor) {
      add_lost(report, where, cause, t - cursor);
      cursor = t;
    }
  };
  // By round: a log of a million rounds must not take a million squared.
  std::map<std::int64_t, const report_incident*> incident_of;
  for (const auto& i : report.incidents) incident_of[i.round] = &i;
  for (const auto& r : report.rounds) {
    auto found = incident_of.find(r.round);
    const report_incident* incident = found == incident_of.end() ? nullptr : found->second;
    double end = std::min(r.ended_at, report.ended_at);
    if (r.running_at) {
      advance_to(std::min(*r.running_at, report.ended_at));
      if (end > cursor) {
        report.productive_s += end - cursor;
        cursor = end;
      }
    } else {
      advance_to(end);
    }
    cause = incident != nullptr       ? incident->incident_class
            : r.ended_by == "succeeded" ? "shutdown"
            : r.ended_by == "stopped"   ? "stopped"
                                        : "unknown";
  }
  advance_to(report.ended_at);
  report.total_s = std::max(0.0, report.ended_at - report.started_at);
  report.goodput = report.total_s > 0 ? report.productive_s / report.total_s : 0;
}

report_outcome outcome_of(const job_report& report, const std::vector<const event*>& run,
                          const std::vector<agent_record>& agents,
                          const std::vector<std::size_t>& members) {
  report_outcome o;
  const event* failed = nullptr;
  const event* rdzv_failed = nullptr;
  bool succeeded = false;
  for (const auto* e : run) {
    if (e->name == "job_failed" && failed == nullptr) failed = e;
    if (e->name == "rendezvous_failed" && rdzv_failed == nullptr) rdzv_failed = e;
    if (e->name == "job_succeeded") succeeded = true;
  }
  // The first agent to exit non-zero says how the job ended.
  std::vector<std::pair<double, int>> exits;
  for (auto m : members) {
    const auto& a = agents[m];
    if (a.exited_at) exits.emplace_back(*a.exited_at, a.exit_code.value_or(0));
  }
  std::sort(exits.begin(), exits.end());
  for (const auto& [at, code] : exits) {
    if (!o.exit_code || (*o.exit_code == 0 && code != 0)) o.exit_code = code;
  }
  if (failed != nullptr) {
    o.state = "failed";
    auto round = integer(failed->fields, "round");
    o.reason = fmt::format("{}{}", round ? fmt::format("in round {}: ", *round) : std::string(),
                           one_line(text(failed->fields, "reason")));
  } else if (rdzv_failed != nullptr) {
    o.state = "failed";
    o.reason = "the rendezvous failed: " + one_line(text(rdzv_failed->fields, "reason"));
  } else if (succeeded) {
    o.state = "succeeded";
  } else if (!report.rounds.empty() && report.rounds.back().ended_by == "stopped") {
    o.state = "stopped";
    for (const auto* e : run) {
      if (e->name == "group_stopping") o.reason = one_line(text(e->fields, "reason"));
    }
  } else if (!report.end_logged) {
    o.reason = "the log ends before every agent exited (still running, or killed)";
  } else {
    o.reason = "the agents exited without logging how the job ended";
  }
  return o;
}

}  // namespace
}  // namespace event_report_parts

double report_round::running_s() const {
  return running_at && ended_at > *running_at ? ended_at - *running_at : 0;
}

namespace event_report_parts {
namespace {

// Every input's events, one timeline of them; throws report_error when
// there is none.
std::vector<event> read_events(const std::vector<report_input>& inputs, job_report& report) {
  std::vector<event> events;
  for (const auto& input : inputs) {
    report.files.push_back(input.name);
    read_lines(input, events, report.skipped_lines);
  }
  if (events.empty()) {
    throw report_error(fmt::format(
        "no dtrun event in {}{}; write one with `dtrun --event-log FILE ...`",
        inputs.size() == 1 ? printable(inputs[0].name) : "the files given",
        report.skipped_lines > 0
            ? fmt::format(" ({} {} not a dtrun event)", report.skipped_lines,
                          report.skipped_lines == 1 ? "line is" : "lines are")
            : std::string()));
  }
  return events;
}

// The chosen run: its agents (by index), their labels in the report (the
// host, or host/pid where a host ran several), its events in time order.
struct run_events {
  std::vector<std::size_t> members;
  node_labels label;
  std::vector<const event*> events;
};

run_events select_run(const std::vector<event>& events, const std::vector<agent_record>& agents,
                      job_report& report) {
  // The agents without a run id join the only run there is.
  auto in_run = [&](const agent_record& a) {
    return a.run_id == report.run_id || (a.run_id.empty() && report.other_runs.empty());
  };
  run_events run;
  std::set<std::string> hosts, repeated;
  for (std::size_t a = 0; a < agents.size(); ++a) {
    if (!in_run(agents[a])) continue;
    run.members.push_back(a);
    if (!hosts.insert(agents[a].host).second) repeated.insert(agents[a].host);
  }
  for (auto a : run.members) {
    const auto& ag = agents[a];
    run.label[a] = repeated.count(ag.host) > 0 ? fmt::format("{}/{}", ag.host, ag.pid) : ag.host;
    report.nodes.push_back(
        {run.label[a], ag.host, ag.pid, ag.first_time, ag.exited_at, ag.exit_code});
  }
  for (const auto& e : events) {
    if (in_run(agents[e.agent])) run.events.push_back(&e);
  }
  return run;
}

// When the run began and ended (every agent's exit, when each logged it),
// and the restarts it counted.
void note_span(const std::vector<const event*>& run, job_report& report) {
  report.events = run.size();
  report.started_at = run.front()->time;
  report.ended_at = run.back()->time;
  report.end_logged = true;
  for (const auto& n : report.nodes) report.end_logged = report.end_logged && n.exited_at;
  if (report.end_logged) {
    report.ended_at = 0;
    for (const auto& n : report.nodes) report.ended_at = std::max(report.ended_at, *n.exited_at);
  }
  for (const auto* e : run) {
    if (e->name == "restart") {
      auto count = integer(e->fields, "count").value_or(0);
      report.restarts = std::max(report.restarts, static_cast<int>(count));
    }
  }
}

// Round `number` as the report shows it, and its incident (added to
// report.incidents); `next` is the round after it, if the log has one.
report_round make_round(std::int64_t number, const round_events& r, const round_events* next,
                        const node_labels& label, job_report& report) {
  report_round rr;
  rr.round = number;
  rr.nodes = static_cast<int>(r.nodes.size());
  bool all_running = !r.nodes.empty();
  for (const auto& [agent, n] : r.nodes) {
    rr.world_size = std::max(rr.world_size, n.world_size);
    auto running = n.running_at();
    all_running = all_running && running;
    if (running) keep_max(rr.running_at, running);
    rr.spans.push_back({label.at(agent), running, 0});
  }
  if (!all_running) rr.running_at.reset();
  std::optional<report_incident> incident = !r.incidents.empty()
                                                ? logged_incident(number, r.incidents, label)
                                                : derive_incident(number, r, label);
  if (incident) {
    rr.ended_at = incident->failed_at;
    rr.ended_by = "incident";
    if (!incident->restart) incident->restart = r.restart;
    report.incidents.push_back(*incident);
  } else if (r.succeeded) {
    rr.ended_by = "succeeded";
    rr.ended_at =
        r.exits.empty() ? report.ended_at : *std::max_element(r.exits.begin(), r.exits.end());
  } else {
    rr.ended_by = "log ends";
    rr.ended_at = report.ended_at;
    for (const auto* e : r.enders) {
      if (e->name == "group_stopping") {
        rr.ended_by = "stopped";
        rr.ended_at = e->time;
        break;
      }
    }
    if (rr.ended_by == "log ends" && next != nullptr && !next->nodes.empty()) {
      rr.ended_at = next->nodes.begin()->second.joined_at;
    }
  }
  for (auto& span : rr.spans) span.ended_at = rr.ended_at;
  return rr;
}

// Node 0's `straggler` events, as named (the fields it wrote; a line
// without them is left out).
void note_stragglers(const std::vector<const event*>& events, job_report& report) {
  for (const auto* e : events) {
    if (e->name != "straggler") continue;
    const json& f = e->fields;
    auto round = integer(f, "round");
    auto own = number(f, "own_work_s");
    auto median = number(f, "job_median_s");
    auto ranks = f.find("straggler_ranks");
    if (!round || !own || !median || ranks == f.end() || !ranks->is_array()) continue;
    report_straggler s;
    s.round = *round;
    s.named_at = e->time;
    s.host = one_line(text(f, "straggler_host"));
    for (const auto& r : *ranks) {
      // At most a node's worth, the agents' own bound.
      if (r.is_number_integer() && s.ranks.size() < agent::work_max_ranks) {
        s.ranks.push_back(r.get<int>());
      }
    }
    s.own_work_s = *own;
    s.job_median_s = *median;
    s.first_step = integer(f, "first_step").value_or(0);
    s.last_step = integer(f, "last_step").value_or(0);
    s.action = one_line(text(f, "action"));
    auto leaves = f.find("leaves");
    s.leaves = leaves != f.end() && leaves->is_boolean() && leaves->get<bool>();
    report.stragglers.push_back(std::move(s));
  }
}

// Recovery: until every node's workers of the next round ran.
void note_recovery(const std::map<std::int64_t, round_events>& rounds, job_report& report) {
  for (auto& i : report.incidents) {
    auto round = rounds.find(i.round);
    if (i.logged || (round != rounds.end() && round->second.job_failed)) continue;
    // The next round (rounds are in order): found by bisection.
    auto next = std::upper_bound(report.rounds.begin(), report.rounds.end(), i.round,
                                 [](std::int64_t n, const report_round& r) { return n < r.round; });
    if (next != report.rounds.end() && next->running_at) {
      i.resumed_at = next->running_at;
      i.recover_s = *next->running_at - i.failed_at;
    }
  }
}

}  // namespace
}  // namespace event_report_parts

job_report build_report(const std::vector<report_input>& inputs, const std::string& run_id) {
  using namespace event_report_parts;
  job_report report;
  std::vector<event> events = read_events(inputs, report);
  // Agents in the order each wrote its lines: a clock stepped back must
  // not make an agent's later lines come before its agent_started (one
  // node told as two).
  auto agents = assign_agents(events);
  // Several files (one per node): one timeline. Equal times keep the order
  // they were written in.
  std::stable_sort(events.begin(), events.end(),
                   [](const event& a, const event& b) { return a.time < b.time; });
  report.run_id = choose_run(agents, run_id, report.other_runs);
  run_events run = select_run(events, agents, report);
  note_span(run.events, report);

  auto rounds = gather_rounds(run.events, agents);
  for (auto it = rounds.begin(); it != rounds.end(); ++it) {
    const auto& [number, r] = *it;
    if (r.nodes.empty() && r.incidents.empty() && r.failures.empty()) continue;
    auto next = std::next(it);
    report.rounds.push_back(
        make_round(number, r, next == rounds.end() ? nullptr : &next->second, run.label, report));
  }
  note_recovery(rounds, report);
  note_stragglers(run.events, report);
  account_time(report);
  report.outcome = outcome_of(report, run.events, agents, run.members);
  return report;
}

}  // namespace dtrun::launcher
