#include "launcher/report/report_text.h"

#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "agent/report/event_log.h"
#include "agent/watch/straggler_detector.h"
#include "launcher/status/text_table.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {

namespace {

using ojson = nlohmann::ordered_json;

std::string iso(double seconds) {
  auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
  return agent::iso8601_utc_ms(std::chrono::system_clock::time_point(ms));
}

// Seconds since the job started, to the millisecond the log holds.
std::string since(const job_report& r, double t) { return fmt::format("{:.3f}", t - r.started_at); }

std::string seconds(std::optional<double> s) { return s ? fmt::format("{:.3f}", *s) : "-"; }

std::string plural(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string culprit(const report_incident& i) {
  std::string out = i.rank ? fmt::format("rank {}", *i.rank) : std::string();
  const auto& where = i.culprit_node ? i.culprit_node : i.culprit_host;
  if (where) out += (out.empty() ? "" : " on ") + printable(*where);
  return out.empty() ? "-" : out;
}

std::string outcome_line(const job_report& r) {
  std::string line = r.outcome.state;
  if (r.outcome.exit_code) line += fmt::format(" (exit code {})", *r.outcome.exit_code);
  if (!r.outcome.reason.empty()) line += ": " + printable(r.outcome.reason);
  return line;
}

// The tables sit two spaces in, under their headings.
std::string indent(const std::string& table) {
  std::string out;
  bool line_start = true;
  for (char c : table) {
    if (line_start && c != '\n') out += "  ";
    out += c;
    line_start = c == '\n';
  }
  return out;
}

// The stragglers node 0 named, beside the incidents (docs/stragglers.md).
std::string straggler_table(const job_report& r) {
  if (r.stragglers.empty()) return "";
  text_table table({"round", "named", "straggler", "ranks", "own work", "job median", "steps",
                    "action"});
  for (const auto& s : r.stragglers) {
    std::string ranks;
    for (int rank : s.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
    std::string action = s.action.empty() ? "-" : s.action;
    if (s.action != "warn" && !s.action.empty()) action += s.leaves ? ": left" : ": stayed";
    table.add({std::to_string(s.round), since(r, s.named_at), printable(s.host),
               ranks.empty() ? "-" : ranks, agent::per_step_text(s.own_work_s),
               agent::per_step_text(s.job_median_s),
               fmt::format("{}-{}", s.first_step, s.last_step), printable(action)});
  }
  return "\nstragglers (own work per step against the job's median, named by node 0):\n" +
         indent(table.render());
}

// Seconds to the millisecond the log holds (no 1.5899999 from the sums).
double rounded_ms(double seconds) { return std::round(seconds * 1000) / 1000; }

ojson optional_number(std::optional<double> v) {
  return v ? ojson(rounded_ms(*v)) : ojson(nullptr);
}

ojson optional_time(std::optional<double> v) { return v ? ojson(iso(*v)) : ojson(nullptr); }

ojson optional_since(const job_report& r, std::optional<double> v) {
  return v ? ojson(rounded_ms(*v - r.started_at)) : ojson(nullptr);
}

ojson stragglers_json(const job_report& r) {
  ojson stragglers = ojson::array();
  for (const auto& s : r.stragglers) {
    stragglers.push_back({{"round", s.round},
                          {"named_at", iso(s.named_at)},
                          {"named_s", rounded_ms(s.named_at - r.started_at)},
                          {"straggler_host", s.host},
                          {"straggler_ranks", s.ranks},
                          {"own_work_s", s.own_work_s},
                          {"job_median_s", s.job_median_s},
                          {"first_step", s.first_step},
                          {"last_step", s.last_step},
                          {"action", s.action},
                          {"leaves", s.leaves}});
  }
  return stragglers;
}

}  // namespace

std::string render_report(const job_report& r) {
  std::string nodes;
  for (const auto& n : r.nodes) nodes += (nodes.empty() ? "" : ", ") + printable(n.label);
  std::string out = fmt::format("run {}: {} ({}), {}\n",
                                printable(r.run_id.empty() ? "?" : r.run_id),
                                plural(r.nodes.size(), "node", "nodes"), nodes,
                                plural(r.events, "event", "events"));
  out += fmt::format("started {}, ended {:.3f} s later{}: {}\n", iso(r.started_at), r.total_s,
                     r.end_logged ? "" : " (the log ends there)", outcome_line(r));
  out += fmt::format("goodput {:.1f}%: {:.3f} s productive of {:.3f} s; {}, {}, {}\n",
                     r.goodput * 100, r.productive_s, r.total_s,
                     plural(r.rounds.size(), "round", "rounds"),
                     plural(r.incidents.size(), "incident", "incidents"),
                     plural(static_cast<std::size_t>(r.restarts), "restart", "restarts"));

  out += "\nrounds (times in seconds since the first agent started):\n";
  text_table rounds({"round", "running", "until", "for", "world", "nodes", "ended by"});
  std::multimap<std::int64_t, const report_incident*> incidents_of;  // by round
  for (const auto& i : r.incidents) incidents_of.emplace(i.round, &i);
  for (const auto& round : r.rounds) {
    std::string ended = round.ended_by;
    auto [from, to] = incidents_of.equal_range(round.round);
    for (auto it = from; it != to; ++it) ended += ": " + it->second->incident_class;
    rounds.add({std::to_string(round.round),
                round.running_at ? since(r, *round.running_at) : "never in full",
                since(r, round.ended_at), fmt::format("{:.3f}", round.running_s()),
                std::to_string(round.world_size), std::to_string(round.nodes), ended});
  }
  if (r.rounds.empty()) {
    out += "  none: no round's workers started\n";
  } else {
    out += indent(rounds.render());
  }

  if (!r.incidents.empty()) {
    out += "\nincidents (detect: failure to detection; recover: failure until every node's "
           "workers ran again):\n";
    text_table incidents({"round", "class", "culprit", "failed", "detect", "recover",
                          "steps lost", "restart", "detail"});
    for (const auto& i : r.incidents) {
      std::string klass = i.incident_class;
      if (!i.section.empty()) klass += " (section " + i.section + ")";
      incidents.add({std::to_string(i.round), printable(klass), culprit(i),
                     since(r, i.failed_at), seconds(i.detect_s),
                     i.resumed_at || i.recover_s ? seconds(i.recover_s) : "job ended",
                     i.steps_lost ? std::to_string(*i.steps_lost) : "-",
                     i.restart ? std::to_string(*i.restart) : "-",
                     printable(i.detail.empty() ? "-" : i.detail)});
    }
    out += indent(incidents.render());
  }

  out += straggler_table(r);
  if (!r.lost_s.empty()) {
    out += "\nlost time (total minus productive, by what it followed):\n";
    text_table lost({"cause", "seconds"});
    for (const auto& [cause, s] : r.lost_s) lost.add({printable(cause), fmt::format("{:.3f}", s)});
    out += indent(lost.render());
  }
  return out;
}

ojson report_json(const job_report& r) {
  ojson nodes = ojson::array();
  for (const auto& n : r.nodes) {
    nodes.push_back({{"label", n.label},
                     {"host", n.host},
                     {"agent_pid", n.agent_pid},
                     {"started_at", iso(n.started_at)},
                     {"exited_at", optional_time(n.exited_at)},
                     {"exit_code", n.exit_code ? ojson(*n.exit_code) : ojson(nullptr)}});
  }
  ojson rounds = ojson::array();
  for (const auto& round : r.rounds) {
    rounds.push_back({{"round", round.round},
                      {"world_size", round.world_size},
                      {"nodes", round.nodes},
                      {"running_at", optional_time(round.running_at)},
                      {"running_from_s", optional_since(r, round.running_at)},
                      {"ended_at", iso(round.ended_at)},
                      {"ended_s", rounded_ms(round.ended_at - r.started_at)},
                      {"running_s", rounded_ms(round.running_s())},
                      {"ended_by", round.ended_by}});
  }
  ojson incidents = ojson::array();
  for (const auto& i : r.incidents) {
    incidents.push_back({{"round", i.round},
                         {"class", i.incident_class},
                         {"rank", i.rank ? ojson(*i.rank) : ojson(nullptr)},
                         {"culprit_host", i.culprit_host ? ojson(*i.culprit_host) : ojson(nullptr)},
                         {"culprit_node", i.culprit_node ? ojson(*i.culprit_node) : ojson(nullptr)},
                         {"exception_type", i.exception_type.empty() ? ojson(nullptr)
                                                                     : ojson(i.exception_type)},
                         {"detail", i.detail},
                         {"step", i.step ? ojson(*i.step) : ojson(nullptr)},
                         {"failed_at", iso(i.failed_at)},
                         {"failed_s", rounded_ms(i.failed_at - r.started_at)},
                         {"detected_at", optional_time(i.detected_at)},
                         {"resumed_at", optional_time(i.resumed_at)},
                         {"detect_s", optional_number(i.detect_s)},
                         {"recover_s", optional_number(i.recover_s)},
                         {"steps_lost", i.steps_lost ? ojson(*i.steps_lost) : ojson(nullptr)},
                         {"restart", i.restart ? ojson(*i.restart) : ojson(nullptr)},
                         {"section", i.section.empty() ? ojson(nullptr) : ojson(i.section)},
                         {"source", i.logged ? "incident events" : "derived"}});
  }
  ojson stragglers = stragglers_json(r);
  ojson lost = ojson::object();
  // Causes are unique in lost_s: appended without ordered_json's linear
  // look-up of each key (a log can name a million classes).
  auto& by_cause = lost.get_ref<ojson::object_t&>();
  for (const auto& [cause, s] : r.lost_s) by_cause.emplace_back(cause, rounded_ms(s));
  return {{"schema", "dtrun.report/1"},
          {"run_id", r.run_id},
          {"files", r.files},
          {"events", r.events},
          {"skipped_lines", r.skipped_lines},
          {"other_runs", r.other_runs},
          {"started_at", iso(r.started_at)},
          {"ended_at", iso(r.ended_at)},
          {"end_logged", r.end_logged},
          {"total_s", rounded_ms(r.total_s)},
          {"productive_s", rounded_ms(r.productive_s)},
          {"goodput", r.goodput},
          {"outcome",
           {{"state", r.outcome.state},
            {"exit_code", r.outcome.exit_code ? ojson(*r.outcome.exit_code) : ojson(nullptr)},
            {"reason", r.outcome.reason}}},
          {"restarts", r.restarts},
          {"nodes", nodes},
          {"rounds", rounds},
          {"incidents", incidents},
          {"stragglers", stragglers},
          {"lost_s", lost}};
}

std::vector<std::string> report_warnings(const job_report& r) {
  std::vector<std::string> lines;
  if (r.skipped_lines > 0) {
    lines.push_back(fmt::format("skipped {}: not a JSON object with a time and an event",
                                plural(r.skipped_lines, "line", "lines")));
  }
  if (!r.other_runs.empty()) {
    std::string runs;
    for (const auto& id : r.other_runs) {
      runs += (runs.empty() ? "" : ", ") + (id.empty() ? "?" : id);
    }
    lines.push_back(fmt::format("the log also holds {} ({}); this is run {}; choose one with "
                                "--run-id ID",
                                plural(r.other_runs.size(), "other run", "other runs"),
                                printable(runs), printable(r.run_id.empty() ? "?" : r.run_id)));
  }
  return lines;
}

}  // namespace dtrun::launcher
