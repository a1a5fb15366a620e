// The last line a worker wrote, for `dtrun status`'s LAST OUTPUT column: a
// progress column for jobs whose output the agent sees (docs/observability.md).
//
// Fed the bytes of one stream as they pass the agent (worker_output), or
// the end of a log file the worker writes itself (--redirects without
// --tee: the agent is not in the data path, so it reads the file's last
// few KiB when asked). Both '\n' and '\r' end a line, so a progress bar
// redrawn in place with '\r' shows its latest state; the line being
// written counts as soon as it has bytes. Memory is bounded: one line of
// at most max_bytes per stream. Bytes are kept as they came; the reader
// makes them printable (last_output_text).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::agent {

class line_tail {
 public:
  // A status line, not a log: the rest of a longer line is dropped.
  static constexpr std::size_t max_bytes = 160;

  void feed(std::string_view data);

  // The line being written if it has bytes, else the last one ended;
  // empty before any.
  const std::string& last() const { return current_.empty() ? ended_ : current_; }

 private:
  std::string current_;  // since the last '\n' or '\r'
  std::string ended_;    // the last non-empty line that ended
};

// The last line of the file at `path`, from its final `window` bytes;
// nullopt when it cannot be read or holds no line.
std::optional<std::string> last_line_of_file(const std::string& path, std::size_t window = 4096);

// What status documents carry: `line` made printable (controls and
// invalid UTF-8 escaped, dtrun::printable) and cut to at most
// `max_bytes` at a character boundary, so a reader's own cut never splits
// one.
std::string last_output_text(std::string_view line, std::size_t max_bytes = 200);

}  // namespace dtrun::agent
