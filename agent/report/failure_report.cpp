#include "agent/report/failure_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "agent/report/event_log.h"
#include "agent/report/failure_hint.h"
#include "agent/spec/failure_class.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace {

namespace fs = std::filesystem;

// One screen: at most this many traceback / log lines and other failures.
constexpr std::size_t max_traceback_lines = 16;
constexpr std::size_t max_other_failures = 8;

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

std::string time_text(std::int64_t ms) {
  return iso8601_utc_ms(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

// "20:31:04.123Z": the date is in the root cause's line already.
std::string clock_text(std::int64_t ms) {
  std::string full = time_text(ms);
  auto t = full.find('T');
  return t == std::string::npos ? full : full.substr(t + 1);
}

// "0-3, 6" for {0, 1, 2, 3, 6}.
std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

// Each line escaped (dtrun::printable) and indented under its field, so
// no line of a worker's text can start a line that looks like dtrun's.
void append_indented(std::string& out, const std::vector<std::string>& lines, std::size_t max) {
  std::size_t first = lines.size() > max ? lines.size() - max : 0;
  if (first > 0) out += fmt::format("    ... ({} earlier line(s) left out)\n", first);
  for (std::size_t i = first; i < lines.size(); ++i) out += "    " + printable(lines[i]) + "\n";
}

}  // namespace

std::vector<std::string> read_log_tail(const std::string& path, std::size_t max_lines,
                                       std::size_t max_bytes) {
  // The worker can replace its stderr.log (it writes to that folder): a
  // FIFO must not block the agent, a link must not lead elsewhere.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0) return {};
  struct stat st{};
  std::string data;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    auto size = static_cast<std::size_t>(st.st_size);
    std::size_t want = std::min(size, max_bytes);
    data.resize(want);
    std::size_t got = 0;
    while (got < want) {
      ssize_t n = ::pread(fd, data.data() + got, want - got,
                          static_cast<off_t>(size - want + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    // A partial first line (we started mid-file) is dropped.
    if (want < size) {
      auto nl = data.find('\n');
      data.erase(0, nl == std::string::npos ? data.size() : nl + 1);
    }
  }
  ::close(fd);
  auto lines = split_lines(data);
  if (lines.size() > max_lines) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(max_lines));
  return lines;
}

failure_record make_failure_record(const worker_exit& e, const error_file_limits& limits) {
  failure_record r;
  r.round = e.round;
  r.host = e.host;
  r.node_rank = e.node_rank;
  r.local_rank = e.local_rank;
  r.rank = e.rank;
  r.pid = e.pid;
  r.exit_code = e.status.code;
  r.signal = e.status.signal;
  r.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(e.time.time_since_epoch()).count();
  r.watchdog = e.watchdog;
  r.hang = e.hang;
  r.hang_section = e.hang_section;
  auto file = load_error_file(e.error_file, limits);
  if (file.present) r.error_file = e.error_file;
  if (file.contents) {
    r.message = file.contents->message;
    r.traceback = file.contents->traceback;
    r.error_time = file.contents->timestamp;
  } else {
    r.error_file_problem = file.problem;
  }
  if (!file.contents && !e.rank_dir.empty()) {
    // Written by --redirects/--tee; absent when the output went to the console.
    std::string log = (fs::path(e.rank_dir) / "stderr.log").string();
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(log, ec))) {
      r.log_file = log;
      r.log_tail = read_log_tail(log);
    }
  }
  failure_evidence evidence{r.exit_code, r.signal,  e.oom_killed, r.hang,
                            r.watchdog,  r.message, r.traceback,  r.log_tail};
  if (!e.rank_dir.empty() && r.message.empty()) {
    // The start-up hook's note of an uncaught exception (python_hook.h):
    // the class and type without @record, whatever --redirects says.
    auto uncaught = read_log_tail((fs::path(e.rank_dir) / "exception.txt").string(), 1, 1024);
    if (!uncaught.empty()) evidence.message = uncaught.front();
  }
  r.failure_class = class_name(classify(evidence));
  r.exception_type = exception_type(evidence);
  r.lost_peer = lost_peer_can_cause(evidence);
  r.hint = failure_hint(r, e.interpreter, own_cgroup_dir());
  return r;
}

std::size_t root_cause_index(const std::vector<failure_record>& failures) {
  // In a collective's timeout every rank in it fails within one window,
  // so the first of them to exit is a victim: a failure of any other kind
  // in the round is what they waited for.
  auto timed_out = [](const failure_record& r) { return r.failure_class == "collective-timeout"; };
  auto key = [&](const failure_record& r) {
    return std::tuple(timed_out(r), r.time_ms, r.node_rank, r.rank);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    if (key(failures[i]) < key(failures[best])) best = i;
  }
  return best;
}

std::string describe_exit(int exit_code, int signal) {
  if (signal != 0) return fmt::format("signal {} ({}), exit code {}", signal, signal_name(signal), exit_code);
  return fmt::format("exit code {}", exit_code);
}

namespace {

// The root cause's block: where, how it ended, its error or its output.
void append_root_cause(std::string& out, const failure_record& root) {
  out += "root cause (the first failure, by the time its agent saw the worker exit):\n";
  out += fmt::format("  time      : {}\n", time_text(root.time_ms));
  out += fmt::format("  host      : {} (node rank {})\n", printable(root.host), root.node_rank);
  out += fmt::format("  rank      : {} (local_rank {})\n", root.rank, root.local_rank);
  out += fmt::format("  pid       : {}\n", root.pid);
  out += fmt::format("  exit      : {}\n", describe_exit(root.exit_code, root.signal));
  out += fmt::format("  class     : {}{}\n", root.failure_class,
                     root.exception_type.empty() ? std::string()
                                                 : " (" + printable(root.exception_type) + ")");
  if (!root.watchdog.empty()) {
    out += fmt::format("  watchdog  : killed by dtrun's file-timer watchdog: {}\n",
                       printable(root.watchdog));
  }
  if (!root.hang.empty() && !root.hang_section.empty()) {
    out += fmt::format("  hang      : killed by dtrun after a hang of section {} "
                       "(--section-timeouts): {}\n",
                       printable(root.hang_section), printable(root.hang));
  } else if (!root.hang.empty()) {
    out += fmt::format("  hang      : killed by dtrun after a hang (--hang-timeout): {}\n",
                       printable(root.hang));
  }
  if (!root.message.empty()) {
    out += fmt::format("  error     : {}\n", printable(root.message));
    out += fmt::format("  error_file: {}\n", printable(root.error_file));
    auto lines = split_lines(root.traceback);
    if (!lines.empty()) {
      out += "  traceback :\n";
      append_indented(out, lines, max_traceback_lines);
    }
  } else {
    if (!root.error_file_problem.empty()) {
      out += fmt::format("  error_file: {} is unusable: {}; ignored\n", printable(root.error_file),
                         printable(root.error_file_problem));
    } else if (root.hang.empty() && root.hint.empty()) {
      out += "  error     : no error file (decorate the entrypoint with torch.distributed.elastic."
             "multiprocessing.errors.record to see the exception here)\n";
    }
    if (!root.log_tail.empty()) {
      out += fmt::format("  stderr    : last {} line(s) of {}:\n", root.log_tail.size(),
                         printable(root.log_file));
      append_indented(out, root.log_tail, max_traceback_lines);
    } else if (!root.log_file.empty()) {
      out += fmt::format("  stderr    : {} is empty\n", printable(root.log_file));
    } else {
      out += fmt::format(
          "  output    : not captured: it went to the console of dtrun on {} (above, on that "
          "node); run with --log-dir DIR --redirects 3 (or --tee 3) to keep it in files\n",
          printable(root.host));
    }
  }
  if (!root.hint.empty()) out += fmt::format("  hint      : {}\n", printable(root.hint));
}

// One line for each other failure (bounded), the earliest first.
void append_other_failures(std::string& out, const std::vector<failure_record>& failures,
                           std::size_t root_index, const summary_context& ctx) {
  std::vector<const failure_record*> others;
  for (std::size_t i = 0; i < failures.size(); ++i) {
    if (i != root_index) others.push_back(&failures[i]);
  }
  std::sort(others.begin(), others.end(), [](const failure_record* a, const failure_record* b) {
    return std::tie(a->time_ms, a->node_rank, a->rank) < std::tie(b->time_ms, b->node_rank, b->rank);
  });
  std::size_t counted = std::max(ctx.published, failures.size());
  if (others.empty()) {
    out += "other failures: none\n";
  } else {
    out += fmt::format("other failures ({}):\n", counted - 1);
    for (std::size_t i = 0; i < others.size() && i < max_other_failures; ++i) {
      const auto& o = *others[i];
      std::string why = !o.message.empty()    ? o.message
                        : !o.watchdog.empty() ? "killed by the file-timer watchdog: " + o.watchdog
                        : !o.hang.empty()     ? "killed after a hang: " + o.hang
                                              : std::string("no error file");
      out += fmt::format("  rank {} (local_rank {}) on {} (node rank {}), pid {}: {} ({}) at {}: {}\n",
                         o.rank, o.local_rank, printable(o.host), o.node_rank, o.pid,
                         describe_exit(o.exit_code, o.signal), o.failure_class,
                         clock_text(o.time_ms),
                         printable(truncate_utf8(why, 160, false)));
    }
    if (counted - 1 > std::min(others.size(), max_other_failures)) {
      out += fmt::format("  ... and {} more\n", counted - 1 - std::min(others.size(), max_other_failures));
    }
  }
}

}  // namespace

std::string format_summary(const std::vector<failure_record>& failures, const summary_context& ctx) {
  std::size_t root_index = root_cause_index(failures);
  const failure_record& root = failures[root_index];
  const std::string rule(72, '=');
  std::string out = rule + "\n";
  out += fmt::format("job failed: {} (run {}, round {}; {})\n", printable(ctx.program),
                     printable(ctx.run_id), root.round, printable(ctx.outcome));
  append_root_cause(out, root);
  if (root.failure_class == "collective-timeout") {
    // Every failure is a timeout (root_cause_index prefers any other):
    // the one that exited first is a victim, not the cause. Ranks that
    // were still running instead never timed out: the suspects.
    out += "  culprit   : unknown: every failed rank timed out in a collective, so this one is "
           "a victim";
    if (!ctx.stopped_ranks.empty()) {
      out += fmt::format("; rank(s) {} on {} were still running (they may never have entered "
                         "it)",
                         rank_ranges(ctx.stopped_ranks), printable(ctx.this_host));
    }
    out += "; set --hang-timeout below the collective's timeout to have dtrun's stacks name "
           "the rank that never entered it\n";
  }
  append_other_failures(out, failures, root_index, ctx);
  if (!ctx.stopped_ranks.empty()) {
    out += fmt::format("stopped by dtrun (not failures): rank(s) {} on {} (node rank {})\n",
                       rank_ranges(ctx.stopped_ranks), printable(ctx.this_host), ctx.this_node_rank);
  }
  out += rule;
  return out;
}

}  // namespace dtrun::agent
