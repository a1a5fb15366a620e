#include <stdexcept>

#include <catch2/catch.hpp>

#include "agent/devices/cpu_list.h"

using namespace dtrun::agent;

TEST_CASE("CPU lists are written in the kernel's range form") {
  CHECK(format_cpu_list({}) == "");
  CHECK(format_cpu_list({3}) == "3");
  CHECK(format_cpu_list({5, 0, 1, 2, 8, 9, 2}) == "0-2,5,8-9");
}

TEST_CASE("CPU lists are read back and bad ones refused") {
  CHECK(parse_cpu_list("0-2,5,8-9\n") == std::vector<int>{0, 1, 2, 5, 8, 9});
  CHECK(parse_cpu_list("") == std::vector<int>{});
  CHECK_THROWS_AS(parse_cpu_list("3-1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_cpu_list("a"), std::invalid_argument);
  CHECK_THROWS_AS(parse_cpu_list("1,,2"), std::invalid_argument);
  CHECK_THROWS_AS(parse_cpu_list("0-99999999"), std::invalid_argument);
}
