#include <catch2/catch.hpp>

#include <string_view>

#include "rendezvous/base/trim.h"

using dtrun::trim;

TEST_CASE("trim drops ASCII blanks at both ends only") {
  CHECK(trim("  a b \t\r\n") == "a b");
  CHECK(trim("\v\fx") == "x");
  CHECK(trim("x") == "x");
  CHECK(trim("").empty());
  CHECK(trim(" \t\n ").empty());
  CHECK(trim("\xc2\xa0x") == "\xc2\xa0x");  // not ASCII: kept
}

TEST_CASE("trim takes the set of blanks when asked") {
  CHECK(trim(" \tx\r ", " \t\r") == "x");
  CHECK(trim("\fx\n", " \t\r") == "\fx\n");
}
