#include "rendezvous/base/number_parse.h"

#include <charconv>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "rendezvous/base/usage_error.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/trim.h"

namespace dtrun {
namespace {

// The token without surrounding blanks and without a leading '+' (which
// Python accepts and std::from_chars does not).
std::string_view token(std::string_view text) {
  text = trim(text);
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') text.remove_prefix(1);
  return text;
}

std::optional<double> parse_double(std::string_view text) {
  return parse_whole<double>(token(text));  // also refuses 1e400 (out of range) and inf/nan
}

std::string seconds_text(double s) { return fmt::format("{}", s); }

usage_error bad_duration(std::string_view name, std::string_view text, duration_limits limits) {
  return usage_error(
      fmt::format("{}: '{}' is not a number of seconds {}", name, text, describe_range(limits)));
}

}  // namespace

std::string describe_range(duration_limits limits) {
  std::string max = limits.max_s == max_duration_s ? fmt::format("{} (10 years)", max_duration_s)
                                                   : seconds_text(limits.max_s);
  return limits.allow_zero ? fmt::format("from 0 to {}", max)
                           : fmt::format("from {} to {}", min_positive_duration_s, max);
}

std::int64_t parse_integer(std::string_view text, std::string_view name, std::int64_t min,
                           std::int64_t max) {
  auto value = parse_whole<std::int64_t>(token(text));
  if (!value || *value < min || *value > max) {
    throw usage_error(
        fmt::format("{}: '{}' is not a whole number from {} to {}", name, text, min, max));
  }
  return *value;
}

std::chrono::milliseconds seconds_to_duration(double seconds, std::string_view name,
                                              duration_limits limits) {
  double least = limits.allow_zero ? 0.0 : min_positive_duration_s;
  // Written so that NaN fails too.
  if (!(seconds >= least && seconds <= limits.max_s)) {
    throw bad_duration(name, seconds_text(seconds), limits);
  }
  // max_s * 1000 is far below 2^63: the cast cannot overflow.
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

std::chrono::milliseconds parse_duration_seconds(std::string_view text, std::string_view name,
                                                 duration_limits limits) {
  auto value = parse_double(text);
  if (!value) throw bad_duration(name, text, limits);
  try {
    return seconds_to_duration(*value, name, limits);
  } catch (const usage_error&) {
    throw bad_duration(name, text, limits);  // quote the text as given
  }
}

}  // namespace dtrun
