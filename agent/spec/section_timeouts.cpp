#include "agent/spec/section_timeouts.h"

#include <fmt/format.h>

#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"
#include "rendezvous/base/usage_error.h"

namespace dtrun::agent {
namespace {

[[noreturn]] void refuse(std::string_view entry, std::string_view why) {
  throw usage_error(fmt::format(
      "--section-timeouts: '{}' {}; use NAME=SECONDS or NAME=auto, comma-separated "
      "(e.g. checkpoint=600,step=auto)",
      printable(std::string(entry)), why));
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '-';
}

void check_name(std::string_view entry, std::string_view name) {
  if (name.empty()) refuse(entry, "has no section name");
  if (name.size() > max_section_name_bytes) {
    refuse(entry, fmt::format("names a section longer than {} bytes", max_section_name_bytes));
  }
  for (char c : name) {
    if (!is_name_char(c)) refuse(entry, "names a section with characters other than letters, "
                                        "digits and _.:-");
  }
}

}  // namespace

section_timeouts parse_section_timeouts(std::string_view text) {
  section_timeouts timeouts;
  if (trim(text).empty()) refuse(text, "names no section");
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view entry = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) refuse(text, "has an empty entry");
    auto equals = entry.find('=');
    if (equals == std::string_view::npos) refuse(entry, "has no '='");
    std::string name(trim(entry.substr(0, equals)));
    std::string_view value = trim(entry.substr(equals + 1));
    check_name(entry, name);
    if (timeouts.count(name) > 0) refuse(entry, "names a section a second time");
    section_timeout timeout;
    if (value != "auto") {
      timeout.fixed = parse_duration_seconds(
          value, fmt::format("--section-timeouts {}", name), {false, max_duration_s});
    }
    timeouts.emplace(std::move(name), timeout);
  }
  return timeouts;
}

std::string to_text(const section_timeouts& timeouts) {
  std::string out;
  for (const auto& [name, timeout] : timeouts) {
    if (!out.empty()) out += ",";
    out += name + "=";
    out += timeout.fixed ? fmt::format("{:g}", static_cast<double>(timeout.fixed->count()) / 1000.0)
                         : std::string("auto");
  }
  return out;
}

}  // namespace dtrun::agent
