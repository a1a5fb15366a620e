// The last few lines of a stream whose size is not ours to choose (a node
// health check's output): memory stays bounded however much it writes,
// and the lines come out printable. Both '\n' and '\r' end a line; empty
// lines are skipped. Each line keeps its first max_line_bytes, so a
// megabyte without a newline costs no more than a short line.
//
// feed() costs time in proportion to the bytes fed (a chunk's lines are
// looked at from its end, and only the newest max_lines of them are
// kept), never one allocation per line: `yes` piped in for a minute is
// read, not stored.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::agent {

class last_lines {
 public:
  static constexpr std::size_t max_lines = 10;
  static constexpr std::size_t max_line_bytes = 200;

  void feed(std::string_view data);

  // The newest lines (the one still being written included), oldest first,
  // each printable (dtrun::printable), at most max_line_bytes of it, and
  // " ... (N bytes)" after one that was cut.
  std::vector<std::string> lines() const;

 private:
  struct line {
    std::string kept;  // its first max_line_bytes
    std::size_t size = 0;  // all of it
    void append(std::string_view more);
  };
  void push(line ended);

  std::deque<line> ended_;  // at most max_lines
  line current_;  // since the last line end
};

}  // namespace dtrun::agent
