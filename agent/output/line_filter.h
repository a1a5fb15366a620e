// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters:
// which tee'd lines are also copied to <attempt>/filtered_std{out,err}.log.
// Pure, so the parsing and the matching are unit-tested without processes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::agent {

// The flag's value as torchrun splits it: on ',' with ",," standing for a
// literal comma ("a,,b,c" -> {"a,b", "c"}); nothing is trimmed. Unlike
// torchrun, empty items are dropped: in torchrun "" or "a," holds an empty
// filter, which matches (duplicates) every line, never what a trailing
// comma meant; here "" is no filter at all, as the flag's default.
std::vector<std::string> parse_duplicate_filters(std::string_view text);

// Appends to `out` each line of `lines` whose content contains any of
// `needles` (plain substrings, case-sensitive, as torchrun's `needle in
// line`). `lines` is what line_assembler produced: whole lines, each
// `prefix_size` bytes of prefix, the content, then '\n'; the copied lines
// keep their prefix (torchrun writes them with the rank's header).
void select_matching_lines(std::string_view lines, std::size_t prefix_size,
                           const std::vector<std::string>& needles, std::string& out);

}  // namespace dtrun::agent
