// Numbers read from text (flags, environment variables, files under /proc,
// store values, etcd's JSON, a peer's message): one strict reading for all
// of them, so that every layer refuses the same bad input the same way.
//
// The whole of `text` must be the number: no blanks around it, no '+', no
// trailing bytes ("12abc", "5s", "1.0" for an integer), no "0x" prefix
// (give the base instead). A value outside T is refused, not clamped or
// wrapped; so is a '-' for an unsigned T. Callers that accept blanks trim
// first (rendezvous/base/trim.h) and say so.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <optional>
#include <string_view>
#include <system_error>

namespace dtrun {

// The integer that all of `text` spells in `base` (2 to 36; letters in
// either case above 10), or nullopt: empty, a byte that is not a digit,
// or a value outside T.
template <std::integral T>
  requires(!std::same_as<T, bool>)
std::optional<T> parse_whole(std::string_view text, int base = 10) {
  T value{};
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(text.data(), last, value, base);
  if (text.empty() || ec != std::errc() || end != last) return std::nullopt;
  return value;
}

// The finite number that all of `text` spells in decimal or scientific
// notation ("30", "0.5", "1e3", "-2"), or nullopt: empty, trailing bytes,
// "inf", "nan", or a value beyond double ("1e400").
template <std::floating_point T>
std::optional<T> parse_whole(std::string_view text) {
  T value{};
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec != std::errc() || end != last || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace dtrun
