#include "agent/health/preflight_verdict.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dtrun::agent {

namespace {

constexpr int verdict_version = 1;

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  std::size_t mid = values.size() / 2;
  if (values.size() % 2 == 1) return values[mid];
  return (values[mid - 1] + values[mid]) / 2;
}

std::string megabytes(double bps) { return fmt::format("{:.3g} MB/s", bps / 1e6); }
std::string milliseconds(double s) { return fmt::format("{:.3g} ms", s * 1e3); }

// How far out a named node is: its figure against the factor's bound.
double severity(const preflight_slow_node& s) {
  return s.figure == "bandwidth" ? s.median / s.value : s.value / s.median;
}

std::optional<preflight_slow_node> judge_node(const preflight_node_figures& f,
                                              const preflight_verdict& v) {
  if (f.bandwidth_bps && v.median_bandwidth_bps &&
      *f.bandwidth_bps * preflight_bandwidth_factor < *v.median_bandwidth_bps) {
    return preflight_slow_node{f.node, f.host, "bandwidth", *f.bandwidth_bps,
                               *v.median_bandwidth_bps, false};
  }
  if (f.compute_s && v.median_compute_s &&
      *f.compute_s > preflight_compute_factor * *v.median_compute_s) {
    return preflight_slow_node{f.node, f.host, "compute", *f.compute_s, *v.median_compute_s,
                               false};
  }
  return std::nullopt;
}

// The slowest first leave, while a spare or the node range has room.
void decide_leaving(preflight_verdict& v, rendezvous::preflight_room room) {
  std::sort(v.slow.begin(), v.slow.end(), [](const auto& a, const auto& b) {
    return severity(a) > severity(b);
  });
  int room_left = room.spares + std::max(0, room.members - room.min_nodes);
  for (auto& s : v.slow) {
    if (room_left > 0) {
      s.leaves = true;
      --room_left;
    } else {
      v.kept_because = fmt::format(
          "no spare node waits and --nnodes needs at least {} node(s), so it stays (warned "
          "only)",
          room.min_nodes);
    }
  }
}

}  // namespace

preflight_verdict judge_preflight(const std::vector<std::optional<preflight_node_figures>>& nodes,
                                  rendezvous::preflight_room room, bool may_leave) {
  preflight_verdict v;
  v.nodes = static_cast<int>(nodes.size());
  std::vector<double> compute, bandwidth;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& f = nodes[i];
    if (!f || !f->problem.empty()) {
      v.unmeasured.push_back(fmt::format("node {}: {}", i, f ? f->problem : "no figures came"));
      if (!f) continue;
    }
    v.seconds = std::max(v.seconds, f->seconds);
    if (!f->compute_s && !f->bandwidth_bps) continue;
    ++v.measured;
    if (f->compute_s) compute.push_back(*f->compute_s);
    if (f->bandwidth_bps) bandwidth.push_back(*f->bandwidth_bps);
  }
  v.median_compute_s = median(compute);
  v.median_bandwidth_bps = median(bandwidth);
  if (v.measured < preflight_min_nodes_to_judge) return v;
  for (const auto& f : nodes) {
    if (!f) continue;
    if (auto slow = judge_node(*f, v)) v.slow.push_back(std::move(*slow));
  }
  if (may_leave) decide_leaving(v, room);
  return v;
}

const preflight_slow_node* preflight_verdict::named(int node) const {
  for (const auto& s : slow) {
    if (s.node == node) return &s;
  }
  return nullptr;
}

std::string describe(const preflight_slow_node& s) {
  if (s.figure == "bandwidth") {
    return fmt::format(
        "node {} (host {}) is slow: bandwidth {} against the job's median {} (under 1/{:g} "
        "of it)",
        s.node, s.host, megabytes(s.value), megabytes(s.median), preflight_bandwidth_factor);
  }
  return fmt::format(
      "node {} (host {}) is slow: compute {} per product against the job's median {} (over "
      "{:g}x)",
      s.node, s.host, milliseconds(s.value), milliseconds(s.median), preflight_compute_factor);
}

std::string summary_line(const preflight_verdict& v) {
  std::string medians;
  if (v.median_compute_s) medians += ", median compute " + milliseconds(*v.median_compute_s);
  if (v.median_bandwidth_bps) medians += ", median bandwidth " + megabytes(*v.median_bandwidth_bps);
  std::string named = v.slow.empty() ? "no node far below the median"
                                     : fmt::format("{} node(s) far below the median", v.slow.size());
  if (v.measured < preflight_min_nodes_to_judge) {
    named = fmt::format("no verdict: fewer than {} nodes measured, and a median of fewer "
                        "cannot tell which one is slow",
                        preflight_min_nodes_to_judge);
  }
  return fmt::format("preflight: {} of {} node(s) measured in {:.1f} s{}; {}", v.measured,
                     v.nodes, v.seconds, medians, named);
}

nlohmann::json preflight_verdict::to_json_value() const {
  nlohmann::json named = nlohmann::json::array();
  for (const auto& s : slow) {
    named.push_back({{"node", s.node}, {"host", s.host}, {"figure", s.figure},
                     {"value", s.value}, {"median", s.median}, {"leaves", s.leaves}});
  }
  auto number = [](const std::optional<double>& x) {
    return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
  };
  return {{"version", verdict_version},
          {"nodes", nodes},
          {"measured", measured},
          {"median_compute_s", number(median_compute_s)},
          {"median_bandwidth_bps", number(median_bandwidth_bps)},
          {"slow", named},
          {"unmeasured", unmeasured},
          {"kept_because", kept_because},
          {"seconds", seconds}};
}

std::optional<preflight_verdict> preflight_verdict::from_json_value(const nlohmann::json& j) {
  try {
    if (j.at("version").get<int>() != verdict_version) return std::nullopt;
    preflight_verdict v;
    v.nodes = j.at("nodes").get<int>();
    v.measured = j.at("measured").get<int>();
    if (!j.at("median_compute_s").is_null()) {
      v.median_compute_s = j.at("median_compute_s").get<double>();
    }
    if (!j.at("median_bandwidth_bps").is_null()) {
      v.median_bandwidth_bps = j.at("median_bandwidth_bps").get<double>();
    }
    for (const auto& s : j.at("slow")) {
      v.slow.push_back({s.at("node").get<int>(), s.at("host").get<std::string>(),
                        s.at("figure").get<std::string>(), s.at("value").get<double>(),
                        s.at("median").get<double>(), s.at("leaves").get<bool>()});
    }
    v.unmeasured = j.at("unmeasured").get<std::vector<std::string>>();
    v.kept_because = j.at("kept_because").get<std::string>();
    v.seconds = j.at("seconds").get<double>();
    return v;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::optional<preflight_verdict> preflight_verdict::parse(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return from_json_value(j);
}

}  // namespace dtrun::agent
