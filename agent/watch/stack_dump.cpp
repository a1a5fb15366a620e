#include "agent/watch/stack_dump.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace {

// faulthandler's MAX_FRAME_DEPTH: a block this long is cut, hence over.
constexpr std::size_t max_frame_depth = 100;

constexpr std::string_view header_tag = "dtrun-stack-hook ";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The value of "key=" up to the next space (or the end).
std::optional<std::string_view> field(std::string_view line, std::string_view key) {
  std::string needle = " " + std::string(key) + "=";
  std::size_t at = line.find(needle);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + needle.size());
  return rest.substr(0, rest.find(' '));
}

std::string_view basename(std::string_view path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "  File "<file>", line <n> in <function>"
std::optional<stack_frame> parse_frame(std::string_view line) {
  constexpr std::string_view open = "  File \"";
  constexpr std::string_view mid = "\", line ";
  if (!starts_with(line, open)) return std::nullopt;
  std::size_t m = line.rfind(mid);
  if (m == std::string_view::npos || m < open.size()) return std::nullopt;
  std::string_view rest = line.substr(m + mid.size());
  std::size_t in = rest.find(" in ");
  if (in == std::string_view::npos) return std::nullopt;
  stack_frame f;
  f.file = std::string(line.substr(open.size(), m - open.size()));
  f.line = parse_whole<int>(rest.substr(0, in)).value_or(0);  // "???": 0
  f.function = std::string(rest.substr(in + 4));
  return f;
}

// "Thread 0x... (most recent call first):" / "Current thread 0x... ...".
std::optional<python_thread> parse_thread_line(std::string_view line) {
  python_thread t;
  if (starts_with(line, "Current thread ")) {
    t.current = true;
    line.remove_prefix(15);
  } else if (starts_with(line, "Thread ")) {
    line.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  if (!starts_with(line, "0x")) return std::nullopt;
  t.ident = std::string(line.substr(0, line.find(' ')));
  return t;
}

bool is_outermost(const stack_frame& f, const hook_header& header) {
  if (f.function == "_run_module_as_main") return true;
  if (f.function != "<module>") return false;
  if (f.file == "<string>" || f.file == "<stdin>") return true;
  if (header.main.empty() || header.main == "-c" || header.main == "-m") return false;
  return f.file == header.main || basename(f.file) == basename(header.main);
}

bool block_over(const python_thread& t, const hook_header& header) {
  if (t.ended || t.truncated || t.frames.size() >= max_frame_depth) return true;
  return !t.frames.empty() && is_outermost(t.frames.back(), header);
}

const python_thread* pick_main(const std::vector<python_thread>& threads) {
  for (const auto& t : threads) {
    if (t.main) return &t;
  }
  return nullptr;
}

std::string where(const stack_frame& f) {
  return printable(f.function) + " (" + printable(basename(f.file)) + ":" + std::to_string(f.line) + ")";
}

}  // namespace

std::optional<hook_header> parse_hook_header(std::string_view line) {
  if (!starts_with(line, header_tag)) return std::nullopt;
  std::string_view padded = line.substr(header_tag.size() - 1);  // keeps the leading space
  auto pid = field(padded, "pid");
  auto ident = field(padded, "main_thread");
  auto sig = field(padded, "signal");
  if (!pid || !ident || !sig) return std::nullopt;
  hook_header h;
  auto p = parse_whole<long>(*pid);
  auto s = parse_whole<int>(*sig);
  if (!p || *p <= 0 || !s || *s <= 0 || !starts_with(*ident, "0x")) return std::nullopt;
  h.pid = static_cast<pid_t>(*p);
  h.signal = *s;
  h.main_thread = std::string(*ident);
  if (auto v = field(padded, "python")) h.python = std::string(*v);
  std::size_t main_at = padded.find(" main=");
  if (main_at != std::string_view::npos) h.main = std::string(padded.substr(main_at + 6));
  return h;
}

std::optional<located_header> find_last_header(std::string_view text) {
  std::optional<located_header> found;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) break;  // not finished: not read
    if (auto h = parse_hook_header(text.substr(start, nl - start))) {
      found = located_header{std::move(*h), nl + 1};
    }
    start = nl + 1;
  }
  return found;
}

const python_thread* python_dump::main_thread() const { return pick_main(threads); }

python_dump parse_dump(std::string_view text, const hook_header& header) {
  python_dump dump;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) break;  // partial last line
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (auto t = parse_thread_line(line)) {
      if (!dump.threads.empty()) dump.threads.back().ended = true;
      dump.threads.push_back(std::move(*t));
      continue;
    }
    if (dump.threads.empty()) continue;
    python_thread& t = dump.threads.back();
    if (auto f = parse_frame(line)) {
      if (!t.ended) t.frames.push_back(std::move(*f));
    } else if (line == "  ...") {
      t.truncated = true;
    } else if (line == "  <no Python frame>") {
      t.ended = true;
    }
    // Blank lines end nothing by themselves: a block cut by the
    // 100-frame limit on 3.13 is followed by one, as is every block.
  }
  bool matched = false;
  for (auto& t : dump.threads) {
    if (t.ident == header.main_thread) {
      t.main = true;
      matched = true;
    }
  }
  if (!matched && !dump.threads.empty()) dump.threads.back().main = true;
  if (const python_thread* m = dump.main_thread()) dump.complete = block_over(*m, header);
  return dump;
}

bool is_user_file(std::string_view file) {
  if (file.empty()) return false;
  // dtrun's own module where the agent writes it (its collectives' timing
  // wraps the training's calls): the caller is the training's frame.
  if (file.ends_with("/python/modules/dtrun.py")) return false;
  if (file.front() == '<') return file == "<string>" || file == "<stdin>";
  std::size_t start = 0;
  std::string_view previous;
  while (start <= file.size()) {
    std::size_t slash = file.find('/', start);
    std::string_view part =
        file.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "site-packages" || part == "dist-packages" || part == "torch") return false;
    // lib/python3.11, lib64/python3.11: a standard library.
    if ((previous == "lib" || previous == "lib64") && starts_with(part, "python") &&
        part.size() > 6 && slash != std::string_view::npos) {
      std::string_view version = part.substr(6);
      if (!version.empty() && std::isdigit(static_cast<unsigned char>(version.front()))) return false;
    }
    if (slash == std::string_view::npos) break;
    previous = part;
    start = slash + 1;
  }
  return true;
}

std::optional<stack_frame> innermost(const python_dump& dump) {
  const python_thread* m = dump.main_thread();
  if (m == nullptr || m->frames.empty()) return std::nullopt;
  return m->frames.front();
}

std::optional<stack_frame> innermost_user(const python_dump& dump) {
  const python_thread* m = dump.main_thread();
  if (m == nullptr) return std::nullopt;
  for (const auto& f : m->frames) {
    if (is_user_file(f.file)) return f;
  }
  return std::nullopt;
}

std::string format_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ',';
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
    } else {
      for (std::size_t k = i; k <= j; ++k) {
        if (k > i) out += ',';
        out += std::to_string(ranks[k]);
      }
    }
    i = j + 1;
  }
  return out;
}

std::string stuck_at(const rank_stack& r) {
  std::string text;
  if (!r.has_python) {
    text = "no Python stack (not a Python worker, or its hook did not load); native: " +
           (r.native.empty() ? std::string("unknown") : printable(r.native));
  } else if (!r.innermost) {
    text = "no Python frame in the main thread; native: " +
           (r.native.empty() ? std::string("unknown") : printable(r.native));
  } else {
    text = where(*r.innermost);
    if (!is_user_file(r.innermost->file) && r.innermost_user) {
      text += " called from " + where(*r.innermost_user);
    }
  }
  if (r.has_python && !r.complete) text += " (dump incomplete)";
  return text;
}

std::string hang_summary(const std::vector<rank_stack>& ranks) {
  // The text after "rank N: " is the group's key: equal text, same place.
  std::map<std::string, std::vector<int>> groups;
  for (const auto& r : ranks) groups[stuck_at(r)].push_back(r.rank);
  std::vector<std::pair<int, std::string>> lines;
  for (auto& [text, members] : groups) {
    int lowest = *std::min_element(members.begin(), members.end());
    lines.emplace_back(lowest, format_ranks(members) + ": " + text + "\n");
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l.second;
  return out;
}

}  // namespace dtrun::agent
