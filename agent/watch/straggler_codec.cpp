#include "agent/watch/straggler_codec.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

namespace {

using json = nlohmann::json;

// A host name longer than this is cut (DNS names have at most 253 bytes).
constexpr std::size_t host_max_bytes = 256;

// Reads `key` of `object` into `out` when it is a number of that type in
// range; false otherwise.
template <typename T>
bool read_number(const json& object, const char* key, T& out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return false;
  if constexpr (std::is_floating_point_v<T>) {
    const double value = it->get<double>();
    if (!std::isfinite(value) || value < 0) return false;
    out = value;
  } else {
    if (!it->is_number_integer()) return false;
    out = it->get<T>();
  }
  return true;
}

// The document when `text` is an object of `schema` with a list under
// `key`. Parsed once: node 0 decodes every node's figures each interval
// (10,000 documents at 10,000 nodes, docs/benchmarks.md).
std::optional<json> document_of(std::string_view text, std::string_view schema, const char* key,
                                std::string& error) {
  json document = json::parse(text, nullptr, false);
  if (!document.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  auto name = document.find("schema");
  if (name == document.end() || !name->is_string() || name->get<std::string>() != schema) {
    error = "not a " + std::string(schema) + " document";
    return std::nullopt;
  }
  auto list = document.find(key);
  if (list == document.end() || !list->is_array()) {
    error = std::string("no list '") + key + "'";
    return std::nullopt;
  }
  return document;
}

json sample_json(const rank_work_sample& sample) {
  return json::array({sample.rank, sample.node_rank, sample.first_step, sample.last_step,
                      sample.own_work_s});
}

std::optional<rank_work_sample> sample_from(const json& entry) {
  if (!entry.is_array() || entry.size() != 5) return std::nullopt;
  for (std::size_t i = 0; i < 4; ++i) {
    if (!entry[i].is_number_integer() || entry[i].get<std::int64_t>() < 0) return std::nullopt;
  }
  if (!entry[4].is_number()) return std::nullopt;
  rank_work_sample sample;
  sample.rank = entry[0].get<int>();
  sample.node_rank = entry[1].get<int>();
  sample.first_step = entry[2].get<std::int64_t>();
  sample.last_step = entry[3].get<std::int64_t>();
  sample.own_work_s = entry[4].get<double>();
  if (!std::isfinite(sample.own_work_s) || sample.own_work_s < 0 ||
      sample.last_step < sample.first_step) {
    return std::nullopt;
  }
  return sample;
}

}  // namespace

std::optional<rank_work_sample> summarize_steps(int rank, int node_rank,
                                                const std::vector<timed_step>& steps,
                                                std::int64_t after) {
  std::vector<double> own;
  rank_work_sample sample{rank, node_rank, 0, 0, 0};
  for (const timed_step& step : steps) {
    if (step.step <= after || step.own_ns <= 0) continue;
    sample.first_step = own.empty() ? step.step : std::min(sample.first_step, step.step);
    sample.last_step = std::max(sample.last_step, step.step);
    own.push_back(static_cast<double>(step.own_ns) / 1e9);
  }
  if (own.empty()) return std::nullopt;
  sample.own_work_s = lower_median(std::move(own));
  return sample;
}

std::string encode_work(const std::string& host, const std::vector<rank_work_sample>& samples) {
  json ranks = json::array();
  for (std::size_t i = 0; i < samples.size() && i < work_max_ranks; ++i) {
    ranks.push_back(sample_json(samples[i]));
  }
  return json{{"schema", work_schema}, {"host", host.substr(0, host_max_bytes)},
              {"ranks", std::move(ranks)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

node_work decode_work(std::string_view text, std::string& error) {
  node_work out;
  auto document = document_of(text, work_schema, "ranks", error);
  if (!document) return out;
  if (auto host = document->find("host"); host != document->end() && host->is_string()) {
    out.host = host->get<std::string>().substr(0, host_max_bytes);
  }
  for (const json& entry : (*document)["ranks"]) {
    if (out.ranks.size() == work_max_ranks) break;
    if (auto sample = sample_from(entry)) out.ranks.push_back(*sample);
  }
  return out;
}

json straggler_json(const named_straggler& named) {
  const straggler_finding& f = named.finding;
  return {{"node_rank", f.node_rank},
          {"host", named.host},
          {"ranks", f.ranks},
          {"whole_node", f.whole_node},
          {"own_work_s", f.own_work_s},
          {"job_median_s", f.job_median_s},
          {"first_step", f.first_step},
          {"last_step", f.last_step},
          {"leaves", named.leaves},
          {"kept_because", named.kept_because}};
}

std::optional<named_straggler> straggler_from_json(const json& entry) {
  named_straggler named;
  straggler_finding& f = named.finding;
  auto host = entry.is_object() ? entry.find("host") : entry.end();
  auto ranks = entry.is_object() ? entry.find("ranks") : entry.end();
  if (!entry.is_object() || host == entry.end() || !host->is_string() || ranks == entry.end() ||
      !ranks->is_array() || !read_number(entry, "node_rank", f.node_rank) ||
      !read_number(entry, "own_work_s", f.own_work_s) ||
      !read_number(entry, "job_median_s", f.job_median_s) ||
      !read_number(entry, "first_step", f.first_step) ||
      !read_number(entry, "last_step", f.last_step)) {
    return std::nullopt;
  }
  named.host = host->get<std::string>().substr(0, host_max_bytes);
  for (const json& rank : *ranks) {
    if (rank.is_number_integer() && f.ranks.size() < work_max_ranks) {
      f.ranks.push_back(rank.get<int>());
    }
  }
  auto flag = [&](const char* key) {
    auto it = entry.find(key);
    return it != entry.end() && it->is_boolean() && it->get<bool>();
  };
  f.whole_node = flag("whole_node");
  named.leaves = flag("leaves");
  auto kept = entry.find("kept_because");
  if (kept != entry.end() && kept->is_string()) {
    named.kept_because = kept->get<std::string>().substr(0, host_max_bytes);
  }
  return named;
}

std::string encode_stragglers(const std::vector<named_straggler>& stragglers) {
  json list = json::array();
  for (const named_straggler& named : stragglers) list.push_back(straggler_json(named));
  return json{{"schema", stragglers_schema}, {"stragglers", std::move(list)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::vector<named_straggler> decode_stragglers(std::string_view text, std::string& error) {
  std::vector<named_straggler> out;
  auto document = document_of(text, stragglers_schema, "stragglers", error);
  if (!document) return out;
  for (const json& entry : (*document)["stragglers"]) {
    if (auto named = straggler_from_json(entry)) out.push_back(std::move(*named));
  }
  return out;
}

}  // namespace dtrun::agent
