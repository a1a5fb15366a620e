#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/output/last_lines.h"

using dtrun::agent::last_lines;
using lines = std::vector<std::string>;

// n copies of c, then tail. Not std::string(n, c) + tail: inlined into
// some unity batches, GCC 12 warns on that (-Warray-bounds, a false
// positive, GCC bug 105329).
namespace last_lines_test {
std::string repeated(std::size_t n, char c, std::string_view tail = {}) {
  std::string s(n, c);
  s += tail;
  return s;
}
}  // namespace last_lines_test

TEST_CASE("last_lines keeps the newest lines, the one being written included", "[health]") {
  last_lines tail;
  CHECK(tail.lines().empty());
  tail.feed("one\ntw");
  CHECK(tail.lines() == lines{"one", "tw"});
  tail.feed("o\r\n\nthree\rfour");
  CHECK(tail.lines() == lines{"one", "two", "three", "four"});
  tail.feed("\n");
  CHECK(tail.lines() == lines{"one", "two", "three", "four"});
}

TEST_CASE("last_lines keeps at most max_lines lines, however they were fed", "[health]") {
  std::string text;
  for (int i = 1; i <= 25; ++i) text += "line " + std::to_string(i) + "\n";
  text += "partial";
  lines expected;
  for (int i = 17; i <= 25; ++i) expected.push_back("line " + std::to_string(i));
  expected.push_back("partial");

  last_lines whole;
  whole.feed(text);
  CHECK(whole.lines() == expected);

  for (std::size_t chunk : {1, 3, 7, 64}) {
    last_lines pieces;
    for (std::size_t at = 0; at < text.size(); at += chunk) pieces.feed(text.substr(at, chunk));
    CHECK(pieces.lines() == expected);
  }
}

TEST_CASE("last_lines cuts a long line and says how long it was", "[health]") {
  last_lines tail;
  tail.feed(std::string(5000, 'a'));
  tail.feed(last_lines_test::repeated(5000, 'b', "\nshort\n"));
  lines got = tail.lines();
  REQUIRE(got.size() == 2);
  CHECK(got[0] == last_lines_test::repeated(last_lines::max_line_bytes, 'a', " ... (10000 bytes)"));
  CHECK(got[1] == "short");
}

TEST_CASE("last_lines escapes what is not printable and keeps each line bounded", "[health]") {
  last_lines tail;
  tail.feed("\x1b[31mred\x07\n");
  tail.feed(last_lines_test::repeated(150, '\x01', "\n"));
  lines got = tail.lines();
  REQUIRE(got.size() == 2);
  CHECK(got[0] == "\\x1b[31mred\\x07");
  // 150 bytes escaped are 600: cut to max_line_bytes, and marked.
  CHECK(got[1].substr(0, 8) == "\\x01\\x01");
  CHECK(got[1].size() <= last_lines::max_line_bytes + 20);
  CHECK(got[1].find(" ... (150 bytes)") != std::string::npos);
}
