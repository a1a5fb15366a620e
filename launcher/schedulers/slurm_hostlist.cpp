#include "launcher/schedulers/slurm_hostlist.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {
namespace {

// The text is quoted in part: a host list may be megabytes long.
hostlist_error bad(std::string_view text, std::string_view why) {
  return hostlist_error(fmt::format("Slurm host list '{}': {}", printable_excerpt(text), why));
}

hostlist_error name_too_long(std::string_view text) {
  return bad(text, fmt::format("it makes host names longer than {} characters",
                               max_host_name_length));
}

hostlist_too_long too_long(std::string_view text, std::size_t limit) {
  return hostlist_too_long(fmt::format(
      "Slurm host list '{}': more than {} hosts", printable_excerpt(text),
      limit == max_hostlist_hosts ? std::string("a million") : std::to_string(limit)));
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::uint64_t number(std::string_view digits, std::string_view text) {
  auto n = parse_whole<std::uint64_t>(digits);
  if (!n) throw bad(text, "number too large");
  return *n;
}

// "01-03,7" -> {"01","02","03","7"}: a range keeps its low bound's width.
std::vector<std::string> expand_bracket(std::string_view inside, std::string_view text,
                                        std::size_t limit) {
  std::vector<std::string> values;
  std::size_t start = 0;
  while (start <= inside.size()) {
    std::size_t comma = std::min(inside.find(',', start), inside.size());
    std::string_view item = inside.substr(start, comma - start);
    start = comma + 1;
    auto dash = item.find('-');
    std::string_view lo = item.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) {
      throw bad(text, fmt::format("'[{}]' is not a list of numbers and ranges", inside));
    }
    std::uint64_t a = number(lo, text);
    std::uint64_t b = number(hi, text);
    if (b < a) throw bad(text, fmt::format("range {} runs backwards", item));
    if (b - a >= limit) throw too_long(text, limit);
    // Zero padding to the low bound's width: no wider than a name may be.
    if (lo.size() > max_host_name_length) throw name_too_long(text);
    // Up to b inclusive without ++n past it (b may be 2^64 - 1).
    for (std::uint64_t n = a;; ++n) {
      values.push_back(fmt::format("{:0{}}", n, lo.size()));
      if (values.size() > limit) throw too_long(text, limit);
      if (n == b) break;
    }
  }
  return values;
}

// One expression: literal text and bracket groups, as a cartesian product.
void expand_expression(std::string_view expr, std::string_view text,
                       std::vector<std::string>& out, std::size_t limit) {
  if (expr.empty()) throw bad(text, "empty host name");
  std::vector<std::string> partial = {""};
  std::size_t longest = 0;  // of the partial names, checked before each grows
  std::size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] == ']') throw bad(text, "unbalanced brackets");
    if (expr[i] != '[') {
      std::size_t next = std::min(expr.find('[', i), expr.size());
      std::string_view literal = expr.substr(i, next - i);
      if (literal.find(']') != std::string_view::npos) throw bad(text, "unbalanced brackets");
      longest += literal.size();
      if (longest > max_host_name_length) throw name_too_long(text);
      for (auto& p : partial) p.append(literal);
      i = next;
      continue;
    }
    std::size_t close = expr.find(']', i);
    if (close == std::string_view::npos) throw bad(text, "unbalanced brackets");
    auto values = expand_bracket(expr.substr(i + 1, close - i - 1), text, limit);
    std::size_t widest = 0;
    for (const auto& v : values) widest = std::max(widest, v.size());
    longest += widest;
    if (longest > max_host_name_length) throw name_too_long(text);
    if (partial.size() * values.size() > limit) throw too_long(text, limit);
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial) {
      for (const auto& v : values) next.push_back(p + v);
    }
    partial = std::move(next);
    i = close + 1;
  }
  if (out.size() + partial.size() > limit) throw too_long(text, limit);
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string_view> split_hostlist(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']') --depth;
    if (depth < 0 || depth > 1) throw bad(text, "unbalanced brackets");
    if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) throw bad(text, "unbalanced brackets");
  parts.push_back(text.substr(start));
  return parts;
}

std::vector<std::string> expand_hostlist(std::string_view text, std::size_t limit) {
  std::vector<std::string> hosts;
  if (text.empty()) throw bad(text, "empty");
  for (auto expr : split_hostlist(text)) expand_expression(expr, text, hosts, limit);
  return hosts;
}

std::string first_host(std::string_view text) {
  auto parts = split_hostlist(text);
  // Only the first expression, and only the first value of each bracket.
  std::string_view expr = parts.front();
  std::string host;
  std::size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] != '[') {
      std::size_t next = std::min(expr.find('[', i), expr.size());
      host.append(expr.substr(i, next - i));
      i = next;
      continue;
    }
    std::size_t close = expr.find(']', i);
    if (close == std::string_view::npos) throw bad(text, "unbalanced brackets");
    std::string_view inside = expr.substr(i + 1, close - i - 1);
    auto first_item = inside.substr(0, inside.find(','));
    host += expand_bracket(first_item.substr(0, first_item.find('-')), text, 1).front();
    i = close + 1;
  }
  if (host.empty()) throw bad(text, "empty host name");
  return host;
}

std::vector<int> expand_tasks_per_node(std::string_view text) {
  auto fail = [&] {
    return hostlist_error(fmt::format(
        "Slurm tasks per node '{}' is not of the form 2(x3),1", text));
  };
  std::vector<int> counts;
  std::size_t start = 0;
  if (text.empty()) throw fail();
  while (start <= text.size()) {
    std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    std::string_view count = item;
    std::uint64_t repeat = 1;
    if (auto paren = item.find('('); paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')') throw fail();
      std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      if (!all_digits(times)) throw fail();
      repeat = number(times, text);
      count = item.substr(0, paren);
    }
    if (!all_digits(count) || count.size() > 6 || repeat > max_hostlist_hosts ||
        counts.size() + repeat > max_hostlist_hosts) {
      throw fail();
    }
    counts.insert(counts.end(), repeat, static_cast<int>(number(count, text)));
  }
  return counts;
}

}  // namespace dtrun::launcher
