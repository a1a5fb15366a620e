#include "launcher/status/status_table.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/status/text_table.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {

namespace {

// Wide enough for a progress line's gist ("epoch 3 step 1200/5000 loss
// 0.41"), narrow enough that a row of the table fits 120 columns.
constexpr std::size_t last_output_width = 40;

std::string shown(const std::string& text) {
  return text.empty() ? "-" : printable(text);
}

// "checkpoint 12s": the section a worker is in and for how long.
std::string section_cell(const agent::worker_status& w) {
  if (!w.section) return "-";
  std::string cell = shown(*w.section);
  if (w.section_seconds) cell += " " + human_duration(*w.section_seconds);
  return cell;
}

// A worker's last line in at most `width` characters (UTF-8 counts once
// per character, not per byte), "..." marking a cut; "-" when unknown.
std::string last_output_cell(const std::optional<std::string>& line, std::size_t width) {
  std::string text = line ? printable(*line) : std::string();
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.empty()) return "-";
  std::vector<std::size_t> starts;  // where each character starts
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  if (starts.size() <= width) return text;
  return text.substr(0, starts[width - 3]) + "...";
}

// --preflight's verdict: rendered here from the typed value; its host
// names came from other agents, hence printable().
std::string preflight_lines(const agent::preflight_verdict& verdict) {
  std::string out = printable(agent::summary_line(verdict)) + "\n";
  for (const auto& slow : verdict.slow) {
    out += fmt::format("preflight: {}{}\n", printable(agent::describe(slow)),
                       slow.leaves ? "; it left the job" : "");
  }
  return out;
}

// One line per failing health check, whole: the reason names what failed
// and the command to check it by hand. `multi`: the job has a nodes table.
std::string health_lines(const std::vector<agent::health_status>& health, bool multi) {
  std::string out;
  for (const auto& h : health) {
    out += fmt::format("health: {}{} ({}): {}\n",
                       multi ? fmt::format("node {} ", h.node_rank) : std::string(),
                       shown(h.check), h.gating ? "keeps the node out" : "warning",
                       shown(h.reason));
  }
  return out;
}

}  // namespace

std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024;
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  auto s = static_cast<std::uint64_t>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string render_status(const agent::job_status& s, double now) {
  std::string out = fmt::format(
      "run {}  round {}  restarts {}/{}  phase {}  nodes {}", shown(s.run_id), s.round,
      s.restarts_used, s.max_restarts, shown(s.phase), s.nnodes);
  if (s.nodes.empty()) {
    out += fmt::format("  agent pid {} on {}", s.agent_pid, shown(s.host));
  }
  if (s.started_at > 0) out += fmt::format("  up {}", human_duration(now - s.started_at));
  out += "\n";
  if (s.failures > 0 || s.hangs_detected > 0) {
    out += fmt::format("worker failures {}  hangs detected {}\n", s.failures, s.hangs_detected);
  }
  std::string by_class;
  for (const auto& [name, count] : s.restarts_by_class) {
    if (count > 0) by_class += fmt::format("{}{} {}", by_class.empty() ? "" : ", ", name, count);
  }
  if (!by_class.empty()) out += fmt::format("restarts by class: {}\n", shown(by_class));
  if (s.productive_seconds && s.lost_seconds && *s.productive_seconds + *s.lost_seconds > 0) {
    out += fmt::format("goodput {:.1f}% (workers ran {:.0f} s, lost {:.0f} s)\n",
                       100.0 * *s.productive_seconds / (*s.productive_seconds + *s.lost_seconds),
                       *s.productive_seconds, *s.lost_seconds);
  }
  for (const auto& named : s.stragglers) {
    out += fmt::format("straggler: {}{}\n",
                       printable(agent::describe(named.finding, named.host)),
                       named.leaves ? "; it leaves the job" : "");
  }
  if (s.preflight) out += preflight_lines(*s.preflight);
  out += health_lines(s.health, !s.nodes.empty());
  if (!s.nodes.empty()) {
    text_table nodes({"NODE", "HOST", "AGENT PID", "STATE", "LAST SEEN"});
    for (const auto& n : s.nodes) {
      nodes.add({std::to_string(n.node_rank), shown(n.host),
                 n.agent_pid > 0 ? std::to_string(n.agent_pid) : "-", shown(n.state),
                 n.last_heartbeat ? human_duration(now - *n.last_heartbeat) + " ago" : "-"});
    }
    out += "\n" + nodes.render();
  }
  if (s.workers.empty()) return out + "\nno workers\n";
  bool multi = !s.nodes.empty();
  std::vector<std::string> header = {"RANK", "LOCAL"};
  if (multi) header.push_back("NODE");
  for (const char* h : {"PID", "STATE", "UPTIME", "CPU%", "RSS", "SINCE OUTPUT", "GPU%", "GPU MEM",
                        "STEP", "SECTION", "LAST OUTPUT"}) {
    header.push_back(h);
  }
  text_table workers(std::move(header));
  for (const auto& w : s.workers) {
    std::vector<std::string> row = {std::to_string(w.rank), std::to_string(w.local_rank)};
    if (multi) row.push_back(std::to_string(w.node_rank));
    std::string state = shown(w.state);
    if (w.exit_code) state += fmt::format(" ({})", *w.exit_code);
    row.push_back(std::to_string(w.pid));
    row.push_back(state);
    row.push_back(w.started_at > 0 && w.state != "exited" ? human_duration(now - w.started_at) : "-");
    row.push_back(w.cpu_percent ? fmt::format("{:.0f}", *w.cpu_percent) : "-");
    row.push_back(w.rss_bytes > 0 ? human_bytes(w.rss_bytes) : "-");
    row.push_back(w.seconds_since_output ? human_duration(*w.seconds_since_output) : "-");
    row.push_back(w.gpu_utilization_percent ? fmt::format("{:.0f}", *w.gpu_utilization_percent) : "-");
    row.push_back(w.gpu_memory_bytes ? human_bytes(*w.gpu_memory_bytes) : "-");
    row.push_back(w.step ? std::to_string(*w.step) : "-");
    row.push_back(section_cell(w));
    row.push_back(last_output_cell(w.last_output, last_output_width));
    workers.add(std::move(row));
  }
  return out + "\n" + workers.render();
}

}  // namespace dtrun::launcher
