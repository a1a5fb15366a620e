#include "agent/watch/section_learner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace dtrun::agent {

void section_learner::observe(const std::string& section, std::uint64_t index,
                              std::int64_t interval_ns) {
  if (index <= rules_.warmup || interval_ns <= 0) return;
  auto& kept = intervals_[section];
  kept.push_back(interval_ns);
  while (kept.size() > rules_.window) kept.pop_front();
}

std::optional<std::chrono::milliseconds> section_learner::timeout(const std::string& section) const {
  auto it = intervals_.find(section);
  if (it == intervals_.end() || it->second.size() < std::max<std::size_t>(rules_.min_samples, 1)) {
    return std::nullopt;
  }
  std::vector<std::int64_t> sorted(it->second.begin(), it->second.end());
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest value with at least `quantile` of them at or below it.
  auto rank = static_cast<std::size_t>(std::ceil(rules_.quantile * static_cast<double>(sorted.size())));
  std::int64_t at = sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
  auto learned = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(static_cast<double>(at) * rules_.margin / 1e6)));
  return std::max(learned, rules_.floor);
}

std::size_t section_learner::samples(const std::string& section) const {
  auto it = intervals_.find(section);
  return it == intervals_.end() ? 0 : it->second.size();
}

nlohmann::ordered_json section_learner::to_json() const {
  nlohmann::ordered_json sections = nlohmann::ordered_json::object();
  for (const auto& [name, kept] : intervals_) {
    nlohmann::ordered_json seconds = nlohmann::ordered_json::array();
    for (auto ns : kept) seconds.push_back(static_cast<double>(ns) / 1e9);
    auto learned = timeout(name);
    sections[name] = {{"timeout_s", learned ? nlohmann::ordered_json(
                                                  static_cast<double>(learned->count()) / 1000.0)
                                            : nlohmann::ordered_json()},
                      {"intervals_s", std::move(seconds)}};
  }
  return {{"schema", section_learning_schema},
          {"rules",
           {{"warmup", rules_.warmup},
            {"min_samples", rules_.min_samples},
            {"window", rules_.window},
            {"quantile", rules_.quantile},
            {"margin", rules_.margin},
            {"floor_s", static_cast<double>(rules_.floor.count()) / 1000.0}}},
          {"sections", std::move(sections)}};
}

std::optional<section_learner> section_learner::from_json(const nlohmann::json& document,
                                                          section_learning rules,
                                                          std::string& error) {
  if (!document.is_object() || document.value("schema", std::string()) != section_learning_schema) {
    error = fmt::format("not a {} document", section_learning_schema);
    return std::nullopt;
  }
  section_learner learner(rules);
  auto sections = document.find("sections");
  if (sections == document.end() || !sections->is_object()) return learner;
  for (const auto& [name, entry] : sections->items()) {
    auto seconds = entry.is_object() ? entry.find("intervals_s") : entry.end();
    if (seconds == entry.end() || !seconds->is_array()) continue;
    auto& kept = learner.intervals_[name];
    for (const auto& s : *seconds) {
      // What this dtrun would have kept: positive, finite, under a year.
      if (!s.is_number() || !(s.get<double>() > 0) || s.get<double>() > 3.2e7) continue;
      kept.push_back(static_cast<std::int64_t>(std::llround(s.get<double>() * 1e9)));
    }
    while (kept.size() > rules.window) kept.pop_front();
  }
  return learner;
}

}  // namespace dtrun::agent
