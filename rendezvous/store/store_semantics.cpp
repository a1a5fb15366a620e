#include "rendezvous/store/store_semantics.h"

#include <cctype>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

compare_set_outcome decide_compare_set(const std::string* current, std::string_view expected,
                                       std::string_view desired) {
  if (current == nullptr) {
    // PyTorch "lies" here and answers `expected` without storing anything;
    // clients (torch's c10d rendezvous among them) rely on it.
    if (expected.empty()) return {true, std::string(desired)};
    return {false, std::string(expected)};
  }
  if (*current == expected) return {true, std::string(desired)};
  return {false, *current};
}

std::optional<std::int64_t> add_to_counter(const std::string* current, std::int64_t delta) {
  std::int64_t base = 0;
  if (current != nullptr) {
    std::string_view text(*current);
    std::size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    text.remove_prefix(i);
    // parse_whole refuses a leading '+', which stoll accepts.
    if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
    // The sign and the digits after it; stoll ignores what follows them.
    std::size_t digits = text.empty() || text[0] != '-' ? 0 : 1;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    auto value = parse_whole<std::int64_t>(text.substr(0, digits));
    if (!value) return std::nullopt;
    base = *value;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(base, delta, &sum)) return std::nullopt;
  return sum;
}

}  // namespace dtrun::rendezvous
