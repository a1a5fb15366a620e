#include "launcher/report/event_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/report/legacy_round_end.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/record/round_record.h"

namespace dtrun::launcher {

namespace {

using json = nlohmann::json;

struct event {
  double time = 0;
  std::string name;
  std::string host;
  long pid = 0;
  json fields;
  std::size_t agent = 0;  // index into agents
};

// One agent process (a node) from its agent_started to its agent_exiting.
struct agent_record {
  std::string host;
  long pid = 0;
  std::string run_id;  // empty: its agent_started is not in the log
  double first_time = 0;
  std::optional<double> exited_at;
  std::optional<int> exit_code;
  int nproc_per_node = 0;
  bool has_events = false;
};

std::optional<std::int64_t> integer(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

std::optional<double> number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A duration a log says: a negative one is a corrupt line's, not a time.
std::optional<double> duration(const json& j, const char* key) {
  auto v = number(j, key);
  return v && *v >= 0 ? v : std::nullopt;
}

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<double> time_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return parse_iso8601(it->get<std::string>());
}

// A worker's message or a reason as one short line for the tables.
std::string one_line(std::string_view s) {
  auto end = s.find('\n');
  return printable_excerpt(s.substr(0, end), 120);
}

void read_lines(const report_input& input, std::vector<event>& out, std::size_t& skipped) {
  std::istringstream in(input.text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      ++skipped;
      continue;
    }
    auto time = time_field(j, "time");
    auto name = text(j, "event");
    if (!time || name.empty()) {
      ++skipped;
      continue;
    }
    event e;
    e.time = *time;
    e.name = std::move(name);
    e.host = text(j, "host");
    e.pid = static_cast<long>(integer(j, "agent_pid").value_or(0));
    e.fields = std::move(j);
    out.push_back(std::move(e));
  }
}

// Splits the events by agent: a host and pid, started again when the same
// pair logs a second agent_started (a reused pid in an appended log).
std::vector<agent_record> assign_agents(std::vector<event>& events) {
  std::vector<agent_record> agents;
  std::map<std::pair<std::string, long>, std::size_t> current;
  for (auto& e : events) {
    auto key = std::make_pair(e.host, e.pid);
    auto it = current.find(key);
    bool fresh = it == current.end() ||
                 (e.name == "agent_started" && agents[it->second].has_events);
    if (fresh) {
      agent_record a;
      a.host = e.host;
      a.pid = e.pid;
      a.first_time = e.time;
      agents.push_back(a);
      current[key] = agents.size() - 1;
    }
    e.agent = current[key];
    agent_record& a = agents[e.agent];
    a.has_events = true;
    if (e.name == "agent_started") {
      a.run_id = text(e.fields, "run_id");
      a.nproc_per_node = static_cast<int>(integer(e.fields, "nproc_per_node").value_or(0));
    } else if (e.name == "agent_exiting") {
      a.exited_at = e.time;
      if (auto code = integer(e.fields, "exit_code")) a.exit_code = static_cast<int>(*code);
    }
  }
  return agents;
}

// Agents whose agent_started is not in the log (a log cut at its head)
// have no run id: they belong to the run when the log holds only one.
std::string choose_run(const std::vector<agent_record>& agents, const std::string& wanted,
                       std::vector<std::string>& others) {
  std::vector<std::string> runs;  // in order of their first agent's start
  std::set<std::string> seen;
  for (const auto& a : agents) {
    if (!a.run_id.empty() && seen.insert(a.run_id).second) runs.push_back(a.run_id);
  }
  if (runs.empty()) return "";
  std::string chosen = runs.back();
  if (!wanted.empty()) {
    if (seen.count(wanted) == 0) {
      std::string known;
      for (const auto& r : runs) known += (known.empty() ? "" : ", ") + r;
      throw report_error(fmt::format("no run '{}' in the event log; it holds: {}",
                                     printable(wanted), printable(known)));
    }
    chosen = wanted;
  }
  for (const auto& r : runs) {
    if (r != chosen) others.push_back(r);
  }
  return chosen;
}

// What one node logged of one round.
struct node_round {
  std::size_t agent = 0;
  int nproc = 0;
  int world_size = 0;
  double joined_at = 0;
  std::vector<double> started;
  std::optional<double> running_at() const {
    if (nproc <= 0 || static_cast<int>(started.size()) < nproc) return std::nullopt;
    auto sorted = started;
    std::sort(sorted.begin(), sorted.end());
    return sorted[static_cast<std::size_t>(nproc - 1)];
  }
};

// Everything the log says about one round.
struct round_events {
  std::map<std::size_t, node_round> nodes;  // by agent
  std::vector<const event*> failures;       // worker_failed
  std::vector<const event*> incidents;      // incident (logged by the agents)
  std::vector<const event*> enders;         // hang, membership, stop, health, node_left
  std::vector<double> exits;                // worker_exited
  bool succeeded = false;
  bool job_failed = false;
  std::optional<int> restart;
};

bool is_stop_reason(const std::string& reason) {
  return reason.rfind("received ", 0) == 0 || reason.rfind("stopped on ", 0) == 0;
}

// The class of the round's end a `membership_change` event tells: from its
// record; a log written before round records has only the sentence.
std::string class_of_round_end(const json& fields) {
  auto at = fields.find("record");
  if (at != fields.end() && at->is_object()) {
    auto end = records::record_from_text(at->dump());
    if (end.kind != records::record_kind::foreign) {
      return std::string(records::class_name(records::round_end_class(end)));
    }
  }
  return std::string(records::class_name(class_of_legacy_round_end(text(fields, "reason"))));
}

std::string describe_failure(const json& f) {
  std::string message = text(f, "message");
  auto rank = integer(f, "rank");
  std::string who = rank ? fmt::format("rank {}", *rank) : std::string("a worker");
  if (!message.empty()) return fmt::format("{}: {}", who, one_line(message));
  std::string signal = text(f, "signal");
  if (!signal.empty()) return fmt::format("{} was killed by {}", who, signal);
  return fmt::format("{} exited with code {}", who, integer(f, "exit_code").value_or(-1));
}

// The incident that ended a round, from the raw events (no `incident`).
using node_labels = std::map<std::size_t, std::string>;  // by agent

std::optional<report_incident> derive_incident(std::int64_t round, const round_events& r,
                                               const node_labels& labels) {
  const event* root = nullptr;
  double root_failed = 0;
  for (const auto* f : r.failures) {
    double at = time_field(f->fields, "exit_time").value_or(f->time);
    if (root == nullptr || at < root_failed) {
      root = f;
      root_failed = at;
    }
  }
  const event* hang = nullptr;
  const event* first_ender = nullptr;
  for (const auto* e : r.enders) {
    if (e->name == "hang_detected" && hang == nullptr) hang = e;
    if (first_ender == nullptr) first_ender = e;
  }
  if (root == nullptr && first_ender == nullptr) return std::nullopt;
  if (root == nullptr && hang == nullptr && first_ender->name == "group_stopping" &&
      is_stop_reason(text(first_ender->fields, "reason"))) {
    return std::nullopt;  // stopped by a signal or a user: not an incident
  }
  report_incident i;
  i.round = round;
  double detected = root != nullptr ? root->time : first_ender->time;
  for (const auto* f : r.failures) detected = std::min(detected, f->time);
  if (first_ender != nullptr) detected = std::min(detected, first_ender->time);
  i.detected_at = detected;
  if (root != nullptr) {
    i.failed_at = std::min(root_failed, detected);
    const json& f = root->fields;
    i.incident_class = !text(f, "message").empty() ? "exception"
                       : !text(f, "signal").empty() ? "signal"
                                                    : "exit";
    if (auto rank = integer(f, "rank")) i.rank = static_cast<int>(*rank);
    i.culprit_host = text(f, "host").empty() ? root->host : text(f, "host");
    if (*i.culprit_host == root->host) i.culprit_node = labels.at(root->agent);
    i.detail = describe_failure(f);
  } else {
    i.failed_at = detected;
    const json& f = first_ender->fields;
    std::string reason = text(f, "reason");
    if (first_ender->name == "membership_change") {
      i.incident_class = class_of_round_end(f);
    } else if (first_ender->name == "node_left" || first_ender->name == "node_health") {
      i.incident_class = "health";
      i.culprit_host = first_ender->host;
      i.culprit_node = labels.at(first_ender->agent);
    }
    i.detail = reason.empty() ? first_ender->name : one_line(reason);
  }
  if (hang != nullptr) {
    // Detected once nothing moved for idle_s: the hang began then.
    i.incident_class = "hang";
    double idle = duration(hang->fields, "idle_s").value_or(0);
    // Not before the round began (a corrupt idle_s put it in 1970).
    double began = hang->time;
    for (const auto& [agent, n] : r.nodes) began = std::min(began, n.joined_at);
    i.failed_at = std::min(i.failed_at, std::max(hang->time - idle, began));
    i.detected_at = std::min(*i.detected_at, hang->time);
    i.detail = fmt::format("no progress from any worker for {:.1f} s", idle);
  }
  i.detect_s = std::max(0.0, *i.detected_at - i.failed_at);
  i.restart = r.restart;
  return i;
}

template <typename T>
void keep_min(std::optional<T>& slot, std::optional<T> v) {
  if (v && (!slot || *v < *slot)) slot = v;
}
template <typename T>
void keep_max(std::optional<T>& slot, std::optional<T> v) {
  if (v && (!slot || *v > *slot)) slot = v;
}

// The incident from the agents' own `incident` events (one per node).
// The node that saw the failure itself knows when it happened (its
// detect_s is set; the others learnt of it later): its event speaks for
// the incident, and its host is the culprit's when it names a rank.
report_incident logged_incident(std::int64_t round, const std::vector<const event*>& events,
                                const node_labels& labels) {
  const event* chosen = nullptr;
  std::optional<double> chosen_failed;
  for (const auto* e : events) {
    auto culprit = text(e->fields, "culprit_host");
    if (!culprit.empty() && culprit == e->host) {
      chosen = e;
      break;
    }
    auto failed = time_field(e->fields, "failed_at");
    if (number(e->fields, "detect_s") && failed && (!chosen_failed || *failed < *chosen_failed)) {
      chosen = e;
      chosen_failed = failed;
    }
  }
  bool saw_it = chosen != nullptr;
  if (chosen == nullptr) chosen = events.front();
  report_incident i;
  i.round = round;
  i.logged = true;
  const json& c = chosen->fields;
  if (auto cls = text(c, "class"); !cls.empty()) i.incident_class = cls;
  if (auto rank = integer(c, "rank")) i.rank = static_cast<int>(*rank);
  if (auto culprit = text(c, "culprit_host"); !culprit.empty()) {
    i.culprit_host = culprit;
  } else if (saw_it && i.rank && !c.contains("culprit_host")) {
    i.culprit_host = chosen->host;
  }
  if (i.culprit_host && *i.culprit_host == chosen->host && (saw_it || c.contains("culprit_host"))) {
    i.culprit_node = labels.at(chosen->agent);
  }
  i.detail = one_line(text(c, "detail"));
  i.exception_type = text(c, "exception_type");
  i.step = integer(c, "step");
  std::optional<double> failed, detected, resumed, detect, recover;
  bool all_ended = true;
  bool detect_field = false;
  for (const auto* e : events) {
    const json& f = e->fields;
    keep_min(failed, time_field(f, "failed_at"));
    keep_min(detected, time_field(f, "detected_at"));
    auto back = time_field(f, "resumed_at");
    if (back) all_ended = false;
    keep_max(resumed, back);
    detect_field = detect_field || f.contains("detect_s");
    keep_min(detect, duration(f, "detect_s"));
    keep_max(recover, duration(f, "recover_s"));
    keep_max(i.steps_lost, integer(f, "steps_lost"));
    auto restart = integer(f, "restart");
    keep_max(i.restart, restart ? std::optional<int>(static_cast<int>(*restart)) : std::nullopt);
  }
  i.failed_at = failed.value_or(detected.value_or(chosen->time));
  i.detected_at = detected;
  if (!all_ended) i.resumed_at = resumed;
  // detect_s null everywhere: no node knows when it happened (a node lost).
  if (detect || detect_field) {
    i.detect_s = detect;
  } else if (detected) {
    i.detect_s = std::max(0.0, *detected - i.failed_at);
  }
  // The job's recovery: the earliest failure until the last node ran again
  // (each node's recover_s counts from when it learnt of it).
  if (i.resumed_at && failed) {
    i.recover_s = std::max(0.0, *i.resumed_at - *failed);
  } else {
    i.recover_s = recover;
  }
  return i;
}

std::map<std::int64_t, round_events> gather_rounds(const std::vector<const event*>& run,
                                                   const std::vector<agent_record>& agents) {
  std::map<std::int64_t, round_events> rounds;
  for (const auto* e : run) {
    const json& f = e->fields;
    if (e->name == "restart") {
      if (auto after = integer(f, "after_round")) {
        auto count = integer(f, "count");
        keep_max(rounds[*after].restart,
                 count ? std::optional<int>(static_cast<int>(*count)) : std::nullopt);
      }
      continue;
    }
    auto round = integer(f, "round");
    if (!round || *round < 0) continue;
    if (e->name == "rendezvous_completed") {
      node_round& n = rounds[*round].nodes[e->agent];
      n.agent = e->agent;
      n.joined_at = e->time;
      n.world_size = static_cast<int>(integer(f, "world_size").value_or(0));
      auto ranks = f.find("ranks");
      if (ranks != f.end() && ranks->is_array() && ranks->size() == 2 &&
          (*ranks)[0].is_number_integer() && (*ranks)[1].is_number_integer()) {
        // Ranks are below 2^31: anything else (a corrupt line) counts 0
        // workers, and cannot overflow the subtraction.
        auto first = (*ranks)[0].get<std::int64_t>(), last = (*ranks)[1].get<std::int64_t>();
        bool sane = first >= 0 && last >= first && last < (std::int64_t{1} << 31);
        n.nproc = sane ? static_cast<int>(last - first + 1) : 0;
      } else {
        n.nproc = agents[e->agent].nproc_per_node;
      }
      continue;
    }
    auto it = rounds.find(*round);
    round_events& r = rounds[*round];
    if (e->name == "worker_started") {
      // Only the workers of a round this node joined (it logs that first).
      if (it != rounds.end() && r.nodes.count(e->agent) > 0) {
        r.nodes[e->agent].started.push_back(e->time);
      }
    } else if (e->name == "worker_exited") {
      r.exits.push_back(e->time);
    } else if (e->name == "worker_failed") {
      r.failures.push_back(e);
    } else if (e->name == "incident") {
      r.incidents.push_back(e);
    } else if (e->name == "hang_detected" || e->name == "membership_change" ||
               e->name == "group_stopping" || e->name == "node_left") {
      r.enders.push_back(e);
    } else if (e->name == "node_health") {
      auto healthy = f.find("healthy");
      if (healthy != f.end() && *healthy == false && text(f, "when") == "while running") {
        r.enders.push_back(e);
      }
    } else if (e->name == "job_succeeded") {
      r.succeeded = true;
    } else if (e->name == "job_failed") {
      r.job_failed = true;
    }
  }
  return rounds;
}

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

double report_round::running_s() const {
  return running_at && ended_at > *running_at ? ended_at - *running_at : 0;
}

std::optional<double> parse_iso8601(const std::string& s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
      used != 19) {
    return std::nullopt;
  }
  using namespace std::chrono;
  year_month_day date{year(y), month(static_cast<unsigned>(mo)), day(static_cast<unsigned>(d))};
  if (!date.ok() || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  double t = static_cast<double>(sys_days(date).time_since_epoch().count()) * 86400.0 +
             h * 3600.0 + mi * 60.0 + sec;
  std::size_t i = 19;
  if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
    double scale = 0.1;
    ++i;
    std::size_t digits = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits, scale /= 10) {
      t += (s[i] - '0') * scale;
    }
    if (digits == 0) return std::nullopt;
  }
  if (i + 1 == s.size() && s[i] == 'Z') return t;
  int oh = 0, om = 0;
  if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') &&
      std::sscanf(s.c_str() + i + 1, "%2d:%2d%n", &oh, &om, &used) == 2 && used == 5) {
    double offset = oh * 3600.0 + om * 60.0;
    return s[i] == '+' ? t - offset : t + offset;
  }
  return std::nullopt;
}

job_report build_report(const std::vector<report_input>& inputs, const std::string& run_id) {
  job_report report;
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
  // Agents in the order each wrote its lines: a clock stepped back must
  // not make an agent's later lines come before its agent_started (one
  // node told as two).
  auto agents = assign_agents(events);
  // Several files (one per node): one timeline. Equal times keep the order
  // they were written in.
  std::stable_sort(events.begin(), events.end(),
                   [](const event& a, const event& b) { return a.time < b.time; });
  report.run_id = choose_run(agents, run_id, report.other_runs);

  // The agents without a run id join the only run there is.
  auto in_run = [&](const agent_record& a) {
    return a.run_id == report.run_id || (a.run_id.empty() && report.other_runs.empty());
  };
  std::vector<std::size_t> members;
  std::set<std::string> hosts, repeated;
  for (std::size_t a = 0; a < agents.size(); ++a) {
    if (!in_run(agents[a])) continue;
    members.push_back(a);
    if (!hosts.insert(agents[a].host).second) repeated.insert(agents[a].host);
  }
  node_labels label;
  for (auto a : members) {
    const auto& ag = agents[a];
    label[a] = repeated.count(ag.host) > 0 ? fmt::format("{}/{}", ag.host, ag.pid) : ag.host;
    report.nodes.push_back({label[a], ag.host, ag.pid, ag.first_time, ag.exited_at, ag.exit_code});
  }
  std::vector<const event*> run;
  for (const auto& e : events) {
    if (in_run(agents[e.agent])) run.push_back(&e);
  }
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

  auto rounds = gather_rounds(run, agents);
  for (auto it = rounds.begin(); it != rounds.end(); ++it) {
    const auto& [number, r] = *it;
    if (r.nodes.empty() && r.incidents.empty() && r.failures.empty()) continue;
    report_round rr;
    rr.round = number;
    rr.nodes = static_cast<int>(r.nodes.size());
    bool all_running = !r.nodes.empty();
    for (const auto& [agent, n] : r.nodes) {
      rr.world_size = std::max(rr.world_size, n.world_size);
      auto running = n.running_at();
      all_running = all_running && running;
      if (running) keep_max(rr.running_at, running);
      rr.spans.push_back({label[agent], running, 0});
    }
    if (!all_running) rr.running_at.reset();
    std::optional<report_incident> incident =
        !r.incidents.empty() ? logged_incident(number, r.incidents, label)
                             : derive_incident(number, r, label);
    if (incident) {
      rr.ended_at = incident->failed_at;
      rr.ended_by = "incident";
      if (!incident->restart) incident->restart = r.restart;
      report.incidents.push_back(*incident);
    } else if (r.succeeded) {
      rr.ended_by = "succeeded";
      rr.ended_at = r.exits.empty() ? report.ended_at
                                    : *std::max_element(r.exits.begin(), r.exits.end());
    } else {
      auto next = std::next(it);
      rr.ended_by = "log ends";
      rr.ended_at = report.ended_at;
      for (const auto* e : r.enders) {
        if (e->name == "group_stopping") {
          rr.ended_by = "stopped";
          rr.ended_at = e->time;
          break;
        }
      }
      if (rr.ended_by == "log ends" && next != rounds.end() && !next->second.nodes.empty()) {
        rr.ended_at = next->second.nodes.begin()->second.joined_at;
      }
    }
    for (auto& span : rr.spans) span.ended_at = rr.ended_at;
    report.rounds.push_back(std::move(rr));
  }

  // Recovery: until every node's workers of the next round ran.
  for (auto& i : report.incidents) {
    if (i.logged || rounds[i.round].job_failed) continue;
    // The next round (rounds are in order): found by bisection.
    auto next = std::upper_bound(report.rounds.begin(), report.rounds.end(), i.round,
                                 [](std::int64_t n, const report_round& r) { return n < r.round; });
    if (next != report.rounds.end() && next->running_at) {
      i.resumed_at = next->running_at;
      i.recover_s = *next->running_at - i.failed_at;
    }
  }
  account_time(report);
  report.outcome = outcome_of(report, run, agents, members);
  return report;
}

}  // namespace dtrun::launcher
