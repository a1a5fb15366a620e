#include "agent/spec/failure_class.h"

#include <csignal>
#include <array>
#include <utility>

namespace dtrun::agent {
namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

bool any_line_says_timeout(const failure_evidence& e) {
  if (says_collective_timeout(e.message) || says_collective_timeout(e.traceback)) return true;
  for (const auto& line : e.log_tail) {
    if (says_collective_timeout(line)) return true;
  }
  return false;
}

bool has_traceback(const failure_evidence& e) {
  for (const auto& line : e.log_tail) {
    if (contains(line, "Traceback (most recent call last)")) return true;
  }
  return false;
}

bool is_dotted_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}

// "TypeError: bad" / "torch.cuda.OutOfMemoryError" -> its type's last
// part; empty when the line does not start with a Python name followed
// by ':' or its end.
std::string type_of_line(std::string_view line) {
  std::size_t n = 0;
  while (n < line.size() && is_dotted_name_char(line[n])) ++n;
  if (n == 0 || (n < line.size() && line[n] != ':')) return "";
  std::string_view name = line.substr(0, n);
  if (auto dot = name.rfind('.'); dot != std::string_view::npos) name = name.substr(dot + 1);
  // A type name starts with a letter or '_' ("3: ..." is not one).
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return "";
  return std::string(name);
}

}  // namespace

bool says_collective_timeout(std::string_view text) {
  return contains(text, "Watchdog caught collective operation timeout") ||
         (contains(text, "Timed out waiting") &&
          (contains(text, "for recv operation") || contains(text, "for send operation")));
}

namespace {

// What a worker says when a peer of its collective (or the workers'
// store, on group rank 0's node) went away. Matching the worker's words
// is inherent here: torch hands the agent no typed cause, only its
// exception's text (the error file) or its stderr. Kept to this one list.
bool says_peer_lost(std::string_view text) {
  static constexpr std::array<std::string_view, 7> words{{
      "Connection closed by peer",   // gloo's tcp pair: the peer's socket closed
      "Connection reset by peer",    // ECONNRESET: gloo, the TCPStore client
      "Broken pipe",                 // EPIPE: a write to a peer that is gone
      "Connection was likely closed",  // torch 2.x TCPStore: "Failed to recv, got 0 bytes"
      "remote process exited or there was a network error",  // NCCL's ncclRemoteError
      "ncclRemoteError",
      "NCCL communicator was aborted",  // torch: a peer's error aborted the communicator
  }};
  for (auto w : words) {
    if (contains(text, w)) return true;
  }
  return says_collective_timeout(text);
}

}  // namespace

bool lost_peer_can_cause(const failure_evidence& e) {
  if (!e.hang.empty() || !e.watchdog.empty() || e.oom_killed) return false;
  if (e.signal != 0 && e.signal != SIGABRT) return false;
  if (says_peer_lost(e.message) || says_peer_lost(e.traceback)) return true;
  for (const auto& line : e.log_tail) {
    if (says_peer_lost(line)) return true;
  }
  return false;
}

failure_class classify(const failure_evidence& e) {
  // dtrun's own kills first: it knows why it sent them.
  if (!e.hang.empty()) return failure_class::hang;
  if (!e.watchdog.empty()) return failure_class::watchdog;
  if (e.signal == SIGKILL && e.oom_killed) return failure_class::oom_kill;
  // NCCL's watchdog aborts the process (SIGABRT); gloo raises, so the
  // worker exits non-zero: either way its words say which collective.
  if (any_line_says_timeout(e)) return failure_class::collective_timeout;
  if (e.signal != 0) return failure_class::signal;
  if (!e.message.empty() || !e.traceback.empty() || has_traceback(e)) {
    return failure_class::exception;
  }
  return failure_class::exit;
}

std::string exception_type(const failure_evidence& e) {
  if (auto t = type_of_line(e.message); !t.empty()) return t;
  // The traceback's last line that names a type: Python prints the
  // exception after its frames (indented lines), chained ones first.
  bool in_traceback = false;
  std::string last;
  for (const auto& line : e.log_tail) {
    if (contains(line, "Traceback (most recent call last)")) {
      in_traceback = true;
      continue;
    }
    if (!in_traceback || line.empty() || line[0] == ' ') continue;
    if (auto t = type_of_line(line); !t.empty()) last = t;
  }
  return last;
}

}  // namespace dtrun::agent
