#include "agent/error_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace dtrun::agent {
namespace {

using json = nlohmann::json;

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Timestamps are strings in torch's nested shape ("1700000000") and
// numbers in the flat one; anything else is ignored.
std::optional<std::int64_t> timestamp_of(const json& value) {
  try {
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_number()) return static_cast<std::int64_t>(value.get<double>());
    if (value.is_string()) return std::stoll(value.get<std::string>());
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string text_of(const json& value) {
  return value.is_string() ? value.get<std::string>()
                           : value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string truncate_utf8(std::string_view text, std::size_t max_bytes, bool keep_tail) {
  if (text.size() <= max_bytes) return std::string(text);
  if (keep_tail) {
    std::size_t start = text.size() - max_bytes;
    while (start < text.size() && is_continuation(text[start])) ++start;
    return std::string(text.substr(start));
  }
  std::size_t end = max_bytes;
  while (end > 0 && is_continuation(text[end])) --end;
  return std::string(text.substr(0, end));
}

std::optional<error_file_contents> parse_error_file(std::string_view text, std::string& problem,
                                                    const error_file_limits& limits) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    problem = "not valid JSON";
    return std::nullopt;
  }
  if (!doc.is_object() || !doc.contains("message")) {
    problem = "no \"message\" field";
    return std::nullopt;
  }
  error_file_contents out;
  const json& message = doc["message"];
  if (message.is_object()) {
    if (!message.contains("message")) {
      problem = "no \"message.message\" field";
      return std::nullopt;
    }
    out.message = text_of(message["message"]);
    if (message.contains("errorCode") && message["errorCode"].is_number_integer()) {
      out.error_code = message["errorCode"].get<int>();
    }
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
      for (const auto& [k, v] : message["extraInfo"].items()) {
        if (k == "py_callstack") {
          out.traceback = text_of(v);
        } else if (k == "timestamp") {
          out.timestamp = timestamp_of(v);
        } else {
          out.extra_info[k] = v;
        }
      }
    }
  } else {
    out.message = text_of(message);
    if (doc.contains("timestamp")) out.timestamp = timestamp_of(doc["timestamp"]);
  }
  if (out.message.size() > limits.max_message_bytes) {
    out.message = truncate_utf8(out.message, limits.max_message_bytes, false) + " ...";
    out.truncated = true;
  }
  if (out.traceback.size() > limits.max_traceback_bytes) {
    std::string tail = truncate_utf8(out.traceback, limits.max_traceback_bytes, true);
    // Start on a whole line: half a frame helps nobody.
    if (auto nl = tail.find('\n'); nl != std::string::npos && nl + 1 < tail.size()) {
      tail.erase(0, nl + 1);
    }
    out.traceback = "... (traceback truncated)\n" + tail;
    out.truncated = true;
  }
  return out;
}

error_file_result load_error_file(const std::string& path, const error_file_limits& limits) {
  error_file_result result;
  if (path.empty()) return result;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return result;  // no file: the common case
  result.present = true;
  if (static_cast<std::size_t>(st.st_size) > limits.max_file_bytes) {
    result.problem = fmt::format("{} bytes, more than the {} dtrun reads", st.st_size,
                                 limits.max_file_bytes);
    return result;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    result.problem = fmt::format("cannot be read: {}", std::strerror(errno));
    return result;
  }
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  // Bounded even if the file grows after stat().
  std::istreambuf_iterator<char> it(in), end;
  for (; it != end && text.size() <= limits.max_file_bytes; ++it) text += *it;
  result.contents = parse_error_file(text, result.problem, limits);
  return result;
}

std::optional<std::string> read_error_file(const std::string& path) {
  auto result = load_error_file(path);
  if (!result.contents) return std::nullopt;
  return result.contents->message;
}

}  // namespace dtrun::agent
