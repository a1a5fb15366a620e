#include "agent/spec/template_substitute.h"

namespace dtrun::agent {
namespace {

// ASCII only, as Python's (?a:[_a-z][_a-z0-9]*) with IGNORECASE.
bool is_identifier_start(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_identifier_char(char c) { return is_identifier_start(c) || (c >= '0' && c <= '9'); }

}  // namespace

std::string safe_substitute(std::string_view t, const template_lookup& lookup,
                            bool collapse_escapes) {
  std::string out;
  out.reserve(t.size());
  std::size_t i = 0;
  while (i < t.size()) {
    if (t[i] != '$') {
      out += t[i++];
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '$') {
      out += collapse_escapes ? "$" : "$$";
      i += 2;
      continue;
    }
    bool braced = i + 1 < t.size() && t[i + 1] == '{';
    std::size_t start = i + (braced ? 2 : 1);
    std::size_t end = start;
    if (end < t.size() && is_identifier_start(t[end])) {
      ++end;
      while (end < t.size() && is_identifier_char(t[end])) ++end;
    }
    bool well_formed = end > start && (!braced || (end < t.size() && t[end] == '}'));
    auto value = well_formed ? lookup(t.substr(start, end - start)) : std::nullopt;
    if (!value) {  // kept as written
      out += '$';
      ++i;
      continue;
    }
    out += *value;
    i = end + (braced ? 1 : 0);
  }
  return out;
}

std::string substitute_local_rank_macro(std::string_view arg, int local_rank) {
  // Most arguments have no '$': nothing to do, and no lookup to build.
  if (arg.find('$') == std::string_view::npos) return std::string(arg);
  return safe_substitute(arg, [local_rank](std::string_view name) -> std::optional<std::string> {
    if (name == "local_rank") return std::to_string(local_rank);
    return std::nullopt;
  }, false);
}

}  // namespace dtrun::agent
