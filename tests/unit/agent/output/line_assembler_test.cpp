#include <string>

#include <catch2/catch.hpp>

#include "agent/output/line_assembler.h"

using dtrun::agent::line_assembler;
using namespace std::string_literals;

namespace {

// Feeds `chunks` one after the other, then ends the stream.
std::string assemble(line_assembler& lines, std::initializer_list<std::string> chunks) {
  std::string out;
  for (const auto& chunk : chunks) CHECK(lines.feed(chunk, out) == chunk.size());
  lines.finish(out);
  return out;
}

}  // namespace

TEST_CASE("complete lines get the prefix, each once") {
  line_assembler lines("[default0]:");
  CHECK(assemble(lines, {"a\nbb\n"}) == "[default0]:a\n[default0]:bb\n");
}

TEST_CASE("a line split over reads is printed once it is complete") {
  line_assembler lines("[p]:");
  std::string out;
  lines.feed("hel", out);
  CHECK(out.empty());
  CHECK(lines.pending() == 3);
  lines.feed("lo\nwor", out);
  CHECK(out == "[p]:hello\n");
  out.clear();
  lines.feed("ld\n", out);
  CHECK(out == "[p]:world\n");
  CHECK(lines.pending() == 0);
}

TEST_CASE("an unfinished last line gets a newline at the end of the stream") {
  line_assembler lines("[p]:");
  CHECK(assemble(lines, {"one\ntwo"}) == "[p]:one\n[p]:two\n");
  line_assembler empty("[p]:");
  CHECK(assemble(empty, {}).empty());
}

TEST_CASE("empty lines are lines") {
  line_assembler lines("[p]:");
  CHECK(assemble(lines, {"\n\nx\n"}) == "[p]:\n[p]:\n[p]:x\n");
}

TEST_CASE("carriage returns and binary bytes pass through untouched") {
  line_assembler lines("[p]:");
  std::string binary = "a\r\n\0\xff\xfe\x01z\r\n"s;
  CHECK(assemble(lines, {binary}) == "[p]:a\r\n[p]:\0\xff\xfe\x01z\r\n"s);
}

TEST_CASE("a line longer than the cap is cut into pieces of the cap") {
  line_assembler lines("[p]:", 4);
  CHECK(assemble(lines, {"abcdefghij\n"}) == "[p]:abcd\n[p]:efgh\n[p]:ij\n");
  line_assembler exact("[p]:", 4);
  CHECK(assemble(exact, {"abcd\nefgh"}) == "[p]:abcd\n[p]:efgh\n");
  line_assembler split("[p]:", 4);
  CHECK(assemble(split, {"ab", "cdef", "g\n"}) == "[p]:abcd\n[p]:efg\n");
  CHECK(split.pending() == 0);
}

TEST_CASE("the held line never exceeds the cap") {
  line_assembler lines("", 8);
  std::string out;
  for (int i = 0; i < 100; ++i) {
    lines.feed("xyz", out);
    CHECK(lines.pending() <= 8);
  }
  CHECK(out.size() == 300 / 8 * 9);
}

TEST_CASE("feeding stops once the output limit is reached, and resumes") {
  line_assembler lines("[rank]:");
  std::string data(100, '\n');
  std::string out;
  std::size_t used = lines.feed(data, out, 20);
  CHECK(used == 3);  // 8 bytes per line: stops at the first line past 20
  CHECK(out == "[rank]:\n[rank]:\n[rank]:\n");
  std::string rest;
  CHECK(lines.feed(std::string_view(data).substr(used), rest) == 97);
  CHECK(rest.size() == 97 * 8);
}
