// CLI11 validators built on number_parse.h, for dtrun's and dtrun-store's
// numeric flags. A bad value throws usage_error out of CLI::App::parse
// (CLI11 passes on exceptions that are not its own), so the message is
// ours: one line naming the flag and the accepted range. A good value is
// rewritten in plain decimal, so CLI11's own conversion cannot read it
// differently (it would take "0x10" as 16, clamp or wrap out-of-range
// integers, and accept "nan").
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/base/number_parse.h"

namespace dtrun {

// A whole number in [min, max] for the flag `name`.
inline CLI::Validator whole_number(std::string name, std::int64_t min, std::int64_t max) {
  return CLI::Validator(
      [name, min, max](std::string& text) {
        text = std::to_string(parse_integer(text, name, min, max));
        return std::string();
      },
      fmt::format("{}..{}", min, max));  // --help: INT:0..65535
}

// A number of seconds within `limits` for the flag `name`.
inline CLI::Validator seconds_within(std::string name, duration_limits limits) {
  return CLI::Validator(
      [name, limits](std::string& text) {
        auto ms = parse_duration_seconds(text, name, limits);
        text = fmt::format("{}", static_cast<double>(ms.count()) / 1000.0);
        return std::string();
      },
      // --help: FLOAT:0..315360000 (seconds)
      fmt::format("{}..{}", limits.allow_zero ? 0.0 : min_positive_duration_s, limits.max_s));
}

}  // namespace dtrun
