// Blanks around a word, a line or a value taken off: one trim for every
// layer (Python's str.strip() without arguments strips the same six).
#pragma once

#include <string_view>

namespace dtrun {

// ASCII whitespace: space, \t, \n, \v, \f, \r (std::isspace in the C locale).
inline constexpr std::string_view ascii_blanks = " \t\n\v\f\r";

// `text` without the leading and trailing bytes that are in `blanks`; ""
// when nothing else is left. A view into `text`: keep `text` alive.
constexpr std::string_view trim(std::string_view text, std::string_view blanks = ascii_blanks) {
  auto first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(blanks) - first + 1);
}

}  // namespace dtrun
