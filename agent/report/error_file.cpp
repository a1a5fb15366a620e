#include "agent/report/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "agent/process/fd_closer.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

using json = nlohmann::json;

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// An integer that fits in int64, whatever JSON number type holds it.
std::optional<std::int64_t> integer_of(const json& value) {
  if (value.is_number_unsigned()) {
    auto v = value.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_number_float()) {
    double d = value.get<double>();
    // Casting a double out of range (or NaN) to an integer is undefined.
    if (!std::isfinite(d) || d < -9.2e18 || d > 9.2e18) return std::nullopt;
    return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

// Timestamps are strings in torch's nested shape ("1700000000") and
// numbers in the flat one; anything else is ignored.
std::optional<std::int64_t> timestamp_of(const json& value) {
  if (value.is_string()) {
    return parse_whole<std::int64_t>(value.get_ref<const std::string&>());
  }
  return integer_of(value);
}

// A message or traceback of the wrong type (a number, an object) is shown
// as its JSON rather than dropped: it is still what the worker said.
std::string text_of(const json& value) {
  return value.is_string() ? value.get<std::string>()
                           : value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What a path holds, for "not a regular file (a FIFO)".
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown kind of file";
}

std::string not_regular(mode_t mode) { return fmt::format("not a regular file ({})", kind_of(mode)); }

std::string cannot_read(int error) { return fmt::format("cannot be read: {}", std::strerror(error)); }

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

json parse_json_bounded(std::string_view text, int max_depth, bool& too_deep) {
  // The parser itself is iterative, but copying or dumping a value
  // recurses: 4 MiB of '[' would run off the stack. Deeper values are
  // discarded as they are parsed (never built), and the whole refused.
  too_deep = false;
  json::parser_callback_t depth_guard = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json doc = json::parse(text.begin(), text.end(), depth_guard, /*allow_exceptions=*/false);
  if (too_deep) return json(json::value_t::discarded);
  return doc;
}

std::optional<error_file_contents> parse_error_file(std::string_view text, std::string& problem,
                                                    const error_file_limits& limits) {
  bool too_deep = false;
  json doc = parse_json_bounded(text, limits.max_depth, too_deep);
  if (too_deep) {
    problem = fmt::format("JSON nested deeper than {} levels", limits.max_depth);
    return std::nullopt;
  }
  if (doc.is_discarded()) {
    problem = "not valid JSON";
    return std::nullopt;
  }
  auto message_it = doc.is_object() ? doc.find("message") : doc.end();
  if (message_it == doc.end()) {
    problem = "no \"message\" field";
    return std::nullopt;
  }
  error_file_contents out;
  const json& message = *message_it;
  if (message.is_object()) {
    auto inner = message.find("message");
    if (inner == message.end()) {
      problem = "no \"message.message\" field";
      return std::nullopt;
    }
    out.message = text_of(*inner);
    if (auto code = message.find("errorCode"); code != message.end()) {
      auto value = integer_of(*code);
      if (value && *value >= std::numeric_limits<int>::min() &&
          *value <= std::numeric_limits<int>::max()) {
        out.error_code = static_cast<int>(*value);
      }
    }
    if (auto extra = message.find("extraInfo"); extra != message.end() && extra->is_object()) {
      for (const auto& [k, v] : extra->items()) {
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
    if (auto stamp = doc.find("timestamp"); stamp != doc.end()) out.timestamp = timestamp_of(*stamp);
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
  // lstat first, so nothing but a regular file is ever opened (opening a
  // device can have effects of its own); fstat after the open decides, in
  // case the path was replaced in between.
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return result;  // no file: the common case
    result.present = true;
    result.problem = cannot_read(errno);
    return result;
  }
  result.present = true;
  if (!S_ISREG(st.st_mode)) {
    result.problem = not_regular(st.st_mode);
    return result;
  }
  // O_NONBLOCK: should a FIFO be there by now, the open returns at once.
  fd_closer file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY)};
  if (file.fd < 0) {
    result.problem = errno == ELOOP ? not_regular(S_IFLNK) : cannot_read(errno);
    return result;
  }
  if (::fstat(file.fd, &st) != 0) {
    result.problem = cannot_read(errno);
    return result;
  }
  if (!S_ISREG(st.st_mode)) {
    result.problem = not_regular(st.st_mode);
    return result;
  }
  // At most one byte past the limit, whatever st_size said: the file may
  // be growing while we read it.
  std::string text;
  const std::size_t want = limits.max_file_bytes + 1;
  while (text.size() < want) {
    std::size_t at = text.size();
    text.resize(std::min(want, at + 64 * 1024));
    ssize_t n = ::read(file.fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) {
      text.resize(at);
      continue;
    }
    if (n < 0) {
      result.problem = cannot_read(errno);
      return result;
    }
    text.resize(at + static_cast<std::size_t>(n));
    if (n == 0) break;
  }
  if (text.size() > limits.max_file_bytes) {
    result.problem = fmt::format("more than the {} bytes dtrun reads", limits.max_file_bytes);
    return result;
  }
  result.contents = parse_error_file(text, result.problem, limits);
  return result;
}

std::optional<std::string> read_error_file(const std::string& path) {
  auto result = load_error_file(path);
  if (!result.contents) return std::nullopt;
  return result.contents->message;
}

}  // namespace dtrun::agent
