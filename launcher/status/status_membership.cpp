#include "launcher/status/status_membership.h"

#include <time.h>

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "agent/monitor/job_census.h"
#include "launcher/status/status_table.h"
#include "launcher/status/text_table.h"
#include "rendezvous/algorithm/rank_table.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {

namespace {

// The spares one screen lists; the count stays exact beyond it (the
// quarantine list is bounded by what the store keeps).
constexpr std::int64_t max_listed = 64;

std::int64_t number_or(const std::string& text, std::int64_t fallback) {
  return parse_whole<std::int64_t>(text).value_or(fallback);
}

// Each key's value, "" for an absent one: check, then get, as
// read_job_status does (the store's multi_get waits for absent keys).
std::vector<std::string> read_present(rendezvous::store& store,
                                      const std::vector<std::string>& keys) {
  std::vector<std::string> values;
  for (const auto& key : keys) values.push_back(store.check({key}) ? store.get(key) : "");
  return values;
}

std::string cell_text(const std::string& text) { return text.empty() ? "-" : printable(text); }

// "2026-11-26 18:05:00" in this machine's time zone.
std::string local_time(double unix_seconds) {
  auto t = static_cast<time_t>(unix_seconds);
  struct tm parts {};
  if (localtime_r(&t, &parts) == nullptr) return "-";
  char text[32];
  if (strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts) == 0) return "-";
  return text;
}

std::string one_line(const std::string& text, std::size_t width) {
  std::string line = printable(text.substr(0, text.find('\n')));
  return line.size() <= width ? line : line.substr(0, width - 3) + "...";
}

std::int64_t active_of(const job_membership& m, int active) {
  return m.members > 0 ? m.members : active;
}

}  // namespace

job_membership read_membership(rendezvous::store& store, const std::string& run_id, double now) {
  rendezvous::rendezvous_keys keys(run_id);
  job_membership m;
  auto newest = read_present(store, {keys.newest_round(), keys.quarantine_count()});
  // Round 0 leaves `round` absent: its joiners compare_set it from "-1".
  m.round = number_or(newest.at(0), 0);
  std::int64_t quarantines = std::clamp<std::int64_t>(number_or(newest.at(1), 0), 0,
                                                     rendezvous::max_quarantine_entries);
  if (m.round >= 0) {
    auto counts = read_present(store, {keys.joined(m.round), keys.closed(m.round)});
    std::int64_t joined = number_or(counts.at(0), 0);
    m.members = std::max<std::int64_t>(0, number_or(counts.at(1), 0));
    m.spares_total = agent::spare_count(joined, m.members);
    std::vector<std::string> spare_keys;
    for (std::int64_t i = m.members + 1; i <= joined && i <= m.members + max_listed; ++i) {
      spare_keys.push_back(keys.node(m.round, static_cast<int>(i)));
    }
    if (m.spares_total > 0 && !spare_keys.empty()) {
      auto descriptors = read_present(store, spare_keys);
      for (std::size_t i = 0; i < descriptors.size(); ++i) {
        spare_node spare;
        spare.arrival = static_cast<int>(m.members + 1 + static_cast<std::int64_t>(i));
        spare.round = m.round;
        try {
          auto d = rendezvous::descriptor_from_text(descriptors[i]);
          spare.host = d.hostname;
          spare.addr = d.addr;
        } catch (const std::exception&) {
          // Not written yet (it ADDs before it SETs) or corrupt: listed as "-".
        }
        m.spares.push_back(std::move(spare));
      }
    }
  }
  if (quarantines > 0) {
    std::vector<std::string> entry_keys;
    for (std::int64_t i = 0; i < quarantines; ++i) entry_keys.push_back(keys.quarantine_entry(i));
    m.quarantined =
        agent::current_quarantines(agent::parse_records(read_present(store, entry_keys)), now);
  }
  return m;
}

std::string render_membership(const job_membership& m, int active, double now) {
  auto spares = m.spares_total;
  auto quarantined = m.quarantined.size();
  std::string out = fmt::format("nodes: {} active, {} spare{}, {} quarantined\n",
                                active_of(m, active), spares, spares == 1 ? "" : "s", quarantined);
  if (!m.spares.empty()) {
    text_table t({"SPARE", "HOST", "ADDRESS", "WAITING IN ROUND"});
    for (const auto& s : m.spares) {
      t.add({std::to_string(s.arrival), cell_text(s.host), cell_text(s.addr),
             std::to_string(s.round)});
    }
    out += "\n" + t.render();
    if (spares > static_cast<std::int64_t>(m.spares.size())) {
      out += fmt::format("(and {} more)\n", spares - static_cast<std::int64_t>(m.spares.size()));
    }
  }
  if (!m.quarantined.empty()) {
    text_table t({"QUARANTINED", "MACHINE", "UNTIL", "TIMES", "REASON"});
    for (const auto& q : m.quarantined) {
      t.add({cell_text(q.host), cell_text(q.machine.substr(0, 12)),
             fmt::format("{} (in {})", local_time(q.until), human_duration(q.until - now)),
             std::to_string(q.quarantines), one_line(q.reason, 60)});
    }
    out += "\n" + t.render();
  }
  return out;
}

void add_membership_json(nlohmann::ordered_json& document, const job_membership& m, int active) {
  using ojson = nlohmann::ordered_json;
  document["node_counts"] = {{"active", active_of(m, active)},
                             {"spare", m.spares_total},
                             {"quarantined", m.quarantined.size()}};
  ojson spares = ojson::array();
  for (const auto& s : m.spares) {
    spares.push_back({{"arrival", s.arrival}, {"host", s.host}, {"addr", s.addr},
                      {"round", s.round}});
  }
  document["spares"] = std::move(spares);
  ojson quarantined = ojson::array();
  for (const auto& q : m.quarantined) {
    quarantined.push_back({{"machine", q.machine}, {"host", q.host},
                           {"quarantines", q.quarantines}, {"since", q.since},
                           {"until", q.until}, {"reason", q.reason}, {"rank", q.rank},
                           {"fault", q.fault}});
  }
  document["quarantined"] = std::move(quarantined);
}

}  // namespace dtrun::launcher
