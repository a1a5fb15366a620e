#include "launcher/report/event_report_impl.h"

#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::launcher {
namespace event_report_parts {

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

}  // namespace event_report_parts

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

}  // namespace dtrun::launcher
