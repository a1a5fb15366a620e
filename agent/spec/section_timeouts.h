// --section-timeouts=checkpoint=600,step=auto: how long a rank may stay in
// a named section (dtrun.section(), or "step" between dtrun.step() calls)
// before it is a hang of that section (docs/agent.md, "Section
// timeouts"). A number is seconds; `auto` is learned from the intervals
// the workers report (agent/watch/section_learner.h).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::agent {

struct section_timeout {
  // The timeout given; nullopt: `auto` (learned).
  std::optional<std::chrono::milliseconds> fixed;
};

// By section name.
using section_timeouts = std::map<std::string, section_timeout>;

// The longest section name (the progress page's slot holds 31 bytes).
inline constexpr std::size_t max_section_name_bytes = 31;

// Parses the flag's value: NAME=SECONDS or NAME=auto, comma-separated, each
// name once; names are 1 to 31 bytes of letters, digits and `_.:-`
// (dtrun.section() names that are longer are cut there). Throws
// usage_error with one line naming the entry and what is accepted.
section_timeouts parse_section_timeouts(std::string_view text);

// The flag's form again ("checkpoint=600,step=auto"), for --dry-run.
std::string to_text(const section_timeouts& timeouts);

}  // namespace dtrun::agent
