// Turns a worker's byte stream into whole console lines, each with the
// rank's prefix. Pure (no I/O), so partial lines, long lines and binary
// output are tested without processes.
//
// Bytes pass through unchanged: only '\n' ends a line ("\r\n" keeps its
// '\r'; NULs and invalid UTF-8 are copied as they are). Memory is bounded:
// the unfinished line is kept up to `max_line` bytes; a longer line is cut
// into pieces of `max_line` bytes, each printed as a line of its own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtrun::agent {

class line_assembler {
 public:
  static constexpr std::size_t default_max_line = 64 * 1024;

  explicit line_assembler(std::string prefix, std::size_t max_line = default_max_line);

  // Appends to `out` every line that `data` completes (prefix, content,
  // '\n') and keeps the unfinished rest. Stops early, once `out` holds at
  // least `out_limit` bytes, so the caller's buffer stays bounded whatever
  // the ratio of prefixes to bytes; returns how many bytes of `data` it
  // consumed (feed the rest after writing `out` out).
  std::size_t feed(std::string_view data, std::string& out,
                   std::size_t out_limit = static_cast<std::size_t>(-1));

  // End of the stream: appends the unfinished line, if any, with a '\n'.
  void finish(std::string& out);

  // Bytes of the unfinished line held.
  std::size_t pending() const { return partial_.size(); }

 private:
  void emit(std::string_view tail, std::string& out);

  std::string prefix_;
  std::size_t max_line_;
  std::string partial_;
};

}  // namespace dtrun::agent
