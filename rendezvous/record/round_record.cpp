#include "rendezvous/record/round_record.h"

#include <array>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dtrun::records {
namespace {

using json = nlohmann::json;

constexpr std::array<std::pair<record_kind, std::string_view>, 9> kind_names{{
    {record_kind::worker_failed, "worker_failed"},
    {record_kind::job_failed, "job_failed"},
    {record_kind::node_lost, "node_lost"},
    {record_kind::node_silent, "node_silent"},
    {record_kind::node_left, "node_left"},
    {record_kind::job_stopped, "job_stopped"},
    {record_kind::newcomer, "newcomer"},
    {record_kind::finished, "finished"},
    {record_kind::store_lost, "store_lost"},
}};

std::string_view kind_name(record_kind k) {
  for (const auto& [value, name] : kind_names) {
    if (value == k) return name;
  }
  return "foreign";
}

std::optional<record_kind> parse_kind(std::string_view name) {
  for (const auto& [value, text] : kind_names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

round_record foreign(std::string_view text, int version) {
  return {.kind = record_kind::foreign, .detail = std::string(text), .version = version};
}

template <typename T>
std::optional<T> optional_field(const json& j, const char* name) {
  auto at = j.find(name);
  if (at == j.end() || at->is_null()) return std::nullopt;
  return at->get<T>();
}

// The fields of a record of this version; throws on a wrong type.
round_record fields_of(const json& j, record_kind kind) {
  round_record r;
  r.kind = kind;
  r.node = j.value("node", -1);
  r.host = j.value("host", std::string());
  r.addr = j.value("addr", std::string());
  r.rank = optional_field<int>(j, "rank");
  if (auto name = optional_field<std::string>(j, "class")) {
    r.klass = parse_class(*name);
    if (!r.klass) throw std::invalid_argument("class");
  }
  r.exception_type = j.value("exception_type", std::string());
  r.exit_code = optional_field<int>(j, "exit_code");
  r.signal = optional_field<int>(j, "signal");
  r.refused = j.value("refused", false);
  r.section = j.value("section", std::string());
  r.detail = j.value("detail", std::string());
  return r;
}

}  // namespace

bool is_departure(const round_record& r) {
  return r.kind == record_kind::node_lost || r.kind == record_kind::node_silent ||
         r.kind == record_kind::node_left;
}

bool is_failure(const round_record& r) {
  return r.kind == record_kind::worker_failed || r.kind == record_kind::job_failed;
}

std::optional<int> departed_rank(const round_record& r) {
  if (!is_departure(r) || r.node < 0) return std::nullopt;
  return r.node;
}

failure_class round_end_class(const round_record& r) {
  switch (r.kind) {
    case record_kind::worker_failed:
    case record_kind::job_failed:
      return r.klass.value_or(failure_class::exit);
    case record_kind::node_lost:
    case record_kind::node_silent:
    case record_kind::store_lost:
      return failure_class::node;
    case record_kind::node_left:
      return r.klass == failure_class::preemption ? failure_class::preemption
                                                  : failure_class::health;
    case record_kind::job_stopped:
    case record_kind::newcomer:
    case record_kind::finished:
    case record_kind::foreign:
      return failure_class::membership;
  }
  return failure_class::membership;
}

std::string stopped_by(const round_record& r) {
  if (r.node >= 0) return fmt::format("node {} (host {}) {}", r.node, r.host, r.detail);
  return fmt::format("host {} {}", r.host, r.detail);
}

std::string describe(const round_record& r) {
  switch (r.kind) {
    case record_kind::worker_failed:
      return fmt::format("node {}: {}{}{}", r.node, r.detail,
                         r.section.empty() ? std::string() : " in section " + r.section,
                         r.klass ? " " + class_tag(*r.klass, r.exception_type) : std::string());
    case record_kind::job_failed:
      return fmt::format("node {}: {}", r.node, r.detail);
    case record_kind::node_lost:
      return fmt::format("node {} ({}) was lost", r.node, r.addr);
    case record_kind::node_silent:
      return fmt::format("node {} stopped sending heartbeats", r.node);
    case record_kind::node_left:
      return fmt::format("node {} (host {}) left the job: {}", r.node, r.host, r.detail);
    case record_kind::job_stopped:
      return "job stopped on " + stopped_by(r);
    case record_kind::newcomer:
      return "a node is waiting to join";
    case record_kind::finished:
      return "every node finished";
    case record_kind::store_lost:
    case record_kind::foreign:
      return r.detail;
  }
  return r.detail;
}

std::string to_text(const round_record& r) {
  json j{{"v", record_version}, {"kind", kind_name(r.kind)}};
  if (r.node >= 0) j["node"] = r.node;
  if (!r.host.empty()) j["host"] = r.host;
  if (!r.addr.empty()) j["addr"] = r.addr;
  if (r.rank) j["rank"] = *r.rank;
  if (r.klass) j["class"] = class_name(*r.klass);
  if (!r.exception_type.empty()) j["exception_type"] = r.exception_type;
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (r.signal) j["signal"] = *r.signal;
  if (r.refused) j["refused"] = true;
  if (!r.section.empty()) j["section"] = r.section;
  if (!r.detail.empty()) j["detail"] = r.detail;
  // Names that are not UTF-8 (a host's, a health check's words) become
  // U+FFFD rather than throwing.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

round_record record_from_text(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return foreign(text, 0);
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) return foreign(text, 0);
  int version = v->get<int>();
  if (version != record_version) return foreign(text, version);
  auto kind_field = j.find("kind");
  auto kind = kind_field != j.end() && kind_field->is_string()
                  ? parse_kind(kind_field->get<std::string>())
                  : std::nullopt;
  if (!kind) return foreign(text, version);
  try {
    return fields_of(j, *kind);
  } catch (const std::exception&) {
    return foreign(text, version);
  }
}

std::string version_mismatch_line(int theirs, std::string_view what) {
  std::string other = theirs == 0
                          ? std::string("sentences (format 0: a dtrun from before round records)")
                          : fmt::format("round records of format {}", theirs);
  return fmt::format(
      "refusing to run with another dtrun version: {} writes {}, this dtrun writes round "
      "records of format {}; run the same dtrun version on every node",
      what, other, record_version);
}

round_record node_lost(int node, std::string addr) {
  return {.kind = record_kind::node_lost, .node = node, .addr = std::move(addr)};
}

round_record node_silent(int node) { return {.kind = record_kind::node_silent, .node = node}; }

round_record newcomer() { return round_record{}; }

round_record leaving(failure_class c, std::string why) {
  return {.kind = record_kind::node_left, .klass = c, .detail = std::move(why)};
}

round_record finished() { return {.kind = record_kind::finished}; }

}  // namespace dtrun::records
