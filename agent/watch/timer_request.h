// The file-timer watchdog's wire format: what torch's FileTimerClient
// writes into the named pipe (torch/distributed/elastic/timer/
// file_based_local_timer.py, the same in 1.13 and 2.x), one JSON object
// per '\n'-terminated line:
//   {"version": 1, "pid": 1234, "scope_id": "train.py#42",
//    "expiration_time": 1700000000.5, "signal": 9}
// expiration_time is wall-clock seconds (time.time() + after); a negative
// one releases the (pid, scope_id) timer. signal 0 or below sets a timer
// that never kills. Pure (no I/O), so hostile input is tested without a
// pipe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace dtrun::agent {

struct timer_request {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // wall-clock seconds since the epoch; < 0: release
  int signal = 0;

  bool is_release() const { return expiration_time < 0; }
};

// torch's client refuses requests longer than PIPE_BUF (so each write is
// atomic); a longer line is not from a torch client.
inline constexpr std::size_t max_timer_line = 4096;
// A scope id longer than this is refused (torch's are "file#line").
inline constexpr std::size_t max_scope_id = 1024;

// Parses one line (without its '\n'). Returns the request, or nullopt with
// `error` saying why (not JSON, a field missing or of the wrong type, pid
// not positive, signal out of range, expiration_time not finite). The
// version field is not checked: torch's server ignores it and every torch
// sends 1.
std::optional<timer_request> parse_timer_request(std::string_view line, std::string& error);

// Splits the pipe's byte stream into lines with bounded memory: a line
// longer than `max_line` bytes is dropped whole (reported once, as an
// overlong line, when its '\n' arrives) instead of being buffered.
class timer_line_splitter {
 public:
  struct line {
    std::string text;       // without the '\n'; empty when overlong
    bool overlong = false;  // more than max_line bytes: dropped
  };

  explicit timer_line_splitter(std::size_t max_line = max_timer_line) : max_line_(max_line) {}

  // Appends to `out` every line that `data` completes; keeps the rest
  // (at most max_line bytes).
  void feed(std::string_view data, std::vector<line>& out);

 private:
  std::size_t max_line_;
  std::string partial_;
  bool overlong_ = false;  // the current line passed max_line_: skip to '\n'
};

}  // namespace dtrun::agent
