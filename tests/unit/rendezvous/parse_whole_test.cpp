#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/base/parse_whole.h"

using dtrun::parse_whole;

TEST_CASE("parse_whole reads a whole decimal integer") {
  CHECK(parse_whole<int>("0") == 0);
  CHECK(parse_whole<int>("42") == 42);
  CHECK(parse_whole<int>("-7") == -7);
  CHECK(parse_whole<std::int64_t>("9223372036854775807") == INT64_MAX);
  CHECK(parse_whole<std::int64_t>("-9223372036854775808") == INT64_MIN);
  CHECK(parse_whole<std::uint64_t>("18446744073709551615") == UINT64_MAX);
  CHECK(parse_whole<int>("007") == 7);
}

TEST_CASE("parse_whole refuses anything that is not all number") {
  for (const char* text : {"", "12abc", "abc", "1 ", " 1", "\t1", "1\n", "+1", "1.0", "1e3",
                           "0x10", "5s", "-", "--1", "1-"}) {
    INFO("text: '" << text << "'");
    CHECK_FALSE(parse_whole<int>(text).has_value());
  }
}

TEST_CASE("parse_whole refuses values beyond the type instead of clamping or wrapping") {
  CHECK_FALSE(parse_whole<std::int64_t>("9223372036854775808").has_value());
  CHECK_FALSE(parse_whole<std::int64_t>("-9223372036854775809").has_value());
  CHECK_FALSE(parse_whole<std::uint64_t>("18446744073709551616").has_value());
  CHECK_FALSE(parse_whole<int>("2147483648").has_value());
  CHECK_FALSE(parse_whole<std::uint16_t>("65536").has_value());
  CHECK(parse_whole<std::uint16_t>("65535") == 65535);
}

TEST_CASE("parse_whole refuses a sign for an unsigned type") {
  CHECK_FALSE(parse_whole<unsigned>("-1").has_value());
  CHECK_FALSE(parse_whole<std::uint64_t>("-0").has_value());
}

TEST_CASE("parse_whole reads other bases when asked, without a prefix") {
  CHECK(parse_whole<std::uint64_t>("ff", 16) == 255);
  CHECK(parse_whole<std::uint64_t>("0000000000004a02", 16) == 0x4a02);
  CHECK_FALSE(parse_whole<std::uint64_t>("0xff", 16).has_value());
  CHECK_FALSE(parse_whole<int>("ff").has_value());
}

TEST_CASE("parse_whole reads a whole finite double") {
  CHECK(parse_whole<double>("30") == 30.0);
  CHECK(parse_whole<double>("0.5") == 0.5);
  CHECK(parse_whole<double>("1e3") == 1000.0);
  CHECK(parse_whole<double>("-2") == -2.0);
  for (const char* text : {"", "5s", " 1", "1 ", "inf", "-inf", "nan", "1e400", "0x10", "+1"}) {
    INFO("text: '" << text << "'");
    CHECK_FALSE(parse_whole<double>(text).has_value());
  }
}
