#include "agent/health/preflight_result.h"

#include <algorithm>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

namespace {

constexpr int result_version = 1;

nlohmann::json optional_number(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::optional<double> read_optional(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::string preflight_rank_result::to_json() const {
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& e : exchanges) {
    pairs.push_back({{"step", e.step},
                     {"partner_node", e.partner_node},
                     {"bytes", e.bytes},
                     {"seconds", e.seconds}});
  }
  nlohmann::json j{{"version", result_version}, {"rank", rank},
                   {"node", node},              {"local_rank", local_rank},
                   {"backend", backend},        {"device", device},
                   {"compute_s", compute_s},    {"exchanges", pairs},
                   {"total_s", total_s}};
  return j.dump();
}

std::optional<preflight_rank_result> preflight_rank_result::parse(const std::string& text,
                                                                  std::string& error) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.at("version").get<int>() != result_version) {
      error = "written by another dtrun version";
      return std::nullopt;
    }
    preflight_rank_result r;
    r.rank = j.at("rank").get<int>();
    r.node = j.at("node").get<int>();
    r.local_rank = j.at("local_rank").get<int>();
    r.backend = j.at("backend").get<std::string>();
    r.device = j.at("device").get<std::string>();
    r.compute_s = j.at("compute_s").get<double>();
    r.total_s = j.at("total_s").get<double>();
    for (const auto& e : j.at("exchanges")) {
      r.exchanges.push_back({e.at("step").get<int>(), e.at("partner_node").get<int>(),
                             e.at("bytes").get<long long>(), e.at("seconds").get<double>()});
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    error = e.what();
    return std::nullopt;
  }
}

std::string preflight_node_figures::to_json() const {
  nlohmann::json j{{"version", result_version},
                   {"node", node},
                   {"host", host},
                   {"ranks", ranks},
                   {"compute_s", optional_number(compute_s)},
                   {"bandwidth_bps", optional_number(bandwidth_bps)},
                   {"seconds", seconds},
                   {"problem", problem}};
  return j.dump();
}

std::optional<preflight_node_figures> preflight_node_figures::parse(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.at("version").get<int>() != result_version) return std::nullopt;
    preflight_node_figures f;
    f.node = j.at("node").get<int>();
    f.host = j.at("host").get<std::string>();
    f.ranks = j.at("ranks").get<int>();
    f.compute_s = read_optional(j, "compute_s");
    f.bandwidth_bps = read_optional(j, "bandwidth_bps");
    f.seconds = j.at("seconds").get<double>();
    f.problem = j.at("problem").get<std::string>();
    return f;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

preflight_node_figures node_figures(int node, std::string host,
                                    const std::vector<preflight_rank_result>& results,
                                    double seconds, std::string problem) {
  preflight_node_figures f;
  f.node = node;
  f.host = std::move(host);
  f.ranks = static_cast<int>(results.size());
  f.seconds = seconds;
  f.problem = std::move(problem);
  // Per step: the bytes the node's ranks moved together, and the slowest
  // of their times.
  std::map<int, std::pair<long long, double>> steps;
  for (const auto& r : results) {
    if (r.compute_s > 0) f.compute_s = std::max(f.compute_s.value_or(0.0), r.compute_s);
    for (const auto& e : r.exchanges) {
      if (e.seconds <= 0 || e.bytes <= 0) continue;
      auto& [bytes, slowest] = steps[e.step];
      bytes += e.bytes;
      slowest = std::max(slowest, e.seconds);
    }
  }
  for (const auto& [step, moved] : steps) {
    double bps = static_cast<double>(moved.first) / moved.second;
    f.bandwidth_bps = std::max(f.bandwidth_bps.value_or(0.0), bps);
  }
  if (!f.compute_s && !f.bandwidth_bps && f.problem.empty()) f.problem = "no rank measured anything";
  return f;
}

}  // namespace dtrun::agent
