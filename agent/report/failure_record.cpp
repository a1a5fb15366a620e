#include "agent/report/failure_record.h"

#include <limits>

#include "agent/report/error_file.h"
#include "agent/spec/failure_class.h"

namespace dtrun::agent {
namespace {

using json = nlohmann::json;

// Records come from other nodes through the store, where anyone who can
// reach it may write one: every field is checked for its type and range
// (a float cast to int out of range is undefined), and text is bounded.
constexpr std::size_t max_record_text = 1024;  // host, paths, the problem
constexpr std::size_t max_record_lines = 64;   // log_tail

template <typename T>
void get_int(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if (it->is_number_unsigned()) {
    auto v = it->template get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) out = static_cast<T>(v);
  } else if (it->is_number_integer()) {
    auto v = it->template get<std::int64_t>();
    if (v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max()) {
      out = static_cast<T>(v);
    }
  }
}

void get_text(const json& j, const char* key, std::string& out, std::size_t max_bytes,
              bool keep_tail = false) {
  auto it = j.find(key);
  if (it != j.end() && it->is_string()) {
    out = truncate_utf8(it->get_ref<const std::string&>(), max_bytes, keep_tail);
  }
}

}  // namespace

json to_json(const failure_record& r) {
  json j{{"round", r.round},          {"host", r.host},         {"node_rank", r.node_rank},
         {"local_rank", r.local_rank}, {"rank", r.rank},         {"pid", r.pid},
         {"exit_code", r.exit_code},   {"signal", r.signal},     {"time_ms", r.time_ms},
         {"message", r.message},       {"traceback", r.traceback}, {"error_file", r.error_file},
         {"error_file_problem", r.error_file_problem}, {"log_file", r.log_file},
         {"log_tail", r.log_tail},     {"watchdog", r.watchdog},
         {"hang", r.hang},             {"hint", r.hint},
         {"class", r.failure_class},   {"exception_type", r.exception_type}};
  j["error_time"] = r.error_time ? json(*r.error_time) : json(nullptr);
  if (!r.hang_section.empty()) j["hang_section"] = r.hang_section;
  return j;
}

std::optional<failure_record> failure_from_json(std::string_view text) {
  // Our records are 2 deep (log_tail); anything much deeper is not one.
  bool too_deep = false;
  json j = parse_json_bounded(text, 8, too_deep);
  if (!j.is_object()) return std::nullopt;
  const error_file_limits limits;
  failure_record r;
  get_int(j, "round", r.round);
  get_text(j, "host", r.host, max_record_text);
  get_int(j, "node_rank", r.node_rank);
  get_int(j, "local_rank", r.local_rank);
  get_int(j, "rank", r.rank);
  get_int(j, "pid", r.pid);
  get_int(j, "exit_code", r.exit_code);
  get_int(j, "signal", r.signal);
  get_int(j, "time_ms", r.time_ms);
  get_text(j, "message", r.message, limits.max_message_bytes + 4);
  get_text(j, "traceback", r.traceback, limits.max_traceback_bytes + 32, /*keep_tail=*/true);
  get_text(j, "error_file", r.error_file, max_record_text);
  get_text(j, "error_file_problem", r.error_file_problem, max_record_text);
  get_text(j, "log_file", r.log_file, max_record_text);
  get_text(j, "watchdog", r.watchdog, max_record_text);
  get_text(j, "hang", r.hang, max_record_text);
  get_text(j, "hang_section", r.hang_section, max_record_text);
  get_text(j, "hint", r.hint, max_record_text);
  get_text(j, "exception_type", r.exception_type, max_record_text);
  // Only a known class: the summary and --no-restart-on trust the name.
  if (auto it = j.find("class"); it != j.end() && it->is_string()) {
    if (auto c = parse_class(it->get_ref<const std::string&>())) r.failure_class = class_name(*c);
  }
  if (auto tail = j.find("log_tail"); tail != j.end() && tail->is_array()) {
    for (const auto& line : *tail) {
      if (line.is_string() && r.log_tail.size() < max_record_lines) {
        r.log_tail.push_back(truncate_utf8(line.get_ref<const std::string&>(), max_record_text, false));
      }
    }
  }
  std::int64_t error_time = 0;
  if (auto it = j.find("error_time"); it != j.end() && it->is_number_integer()) {
    get_int(j, "error_time", error_time);
    r.error_time = error_time;
  }
  return r;
}

}  // namespace dtrun::agent
