#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/output/output_tail.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
using namespace std::string_literals;

TEST_CASE("the last line: a redraw with '\\r' counts, the line being written counts") {
  line_tail tail;
  CHECK(tail.last().empty());
  tail.feed("loading data\n");
  CHECK(tail.last() == "loading data");
  tail.feed("epoch 1:  10%\repoch 1:  20%\r");
  CHECK(tail.last() == "epoch 1:  20%");
  tail.feed("epoch 1:  3");  // half a redraw: the newest bytes show
  CHECK(tail.last() == "epoch 1:  3");
  tail.feed("0%\r\n\n\r\n");  // empty lines do not hide the last one
  CHECK(tail.last() == "epoch 1:  30%");
}

TEST_CASE("the last line is bounded: the rest of a long line is dropped") {
  line_tail tail;
  tail.feed(std::string(100000, 'x'));
  CHECK(tail.last() == std::string(line_tail::max_bytes, 'x'));
  tail.feed("\nshort\n");
  CHECK(tail.last() == "short");
}

TEST_CASE("a log file's last line comes from its end") {
  testing::scoped_temp_dir dir{"dtrun-tail"};
  auto path = (dir.path / "stdout.log").string();
  CHECK(!last_line_of_file(path));  // missing
  std::ofstream(path) << std::string(10000, 'a') << "\nfirst\nstep 9/10\r\n";
  CHECK(last_line_of_file(path) == "step 9/10");
  std::ofstream(path, std::ios::trunc) << "\n\n";
  CHECK(!last_line_of_file(path));
  CHECK(!last_line_of_file(dir.path.string()));  // not a regular file
}

TEST_CASE("status documents carry the line printable and cut at a character") {
  CHECK(last_output_text("loss \x1b[1m0.4\x1b[0m") == "loss \\x1b[1m0.4\\x1b[0m");
  CHECK(last_output_text("bad \xff byte") == "bad \\xff byte");
  // "é" is two bytes: a cut inside it moves back before it.
  CHECK(last_output_text("abc\xc3\xa9", 4) == "abc");
  CHECK(last_output_text("abc\xc3\xa9", 5) == "abc\xc3\xa9");
}
