#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/usage_error.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using std::chrono::milliseconds;

namespace {

// The usage error parsing `text` gives, or "" when it parses.
template <typename Parse>
std::string error_of(Parse parse) {
  try {
    parse();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("whole numbers are decimal tokens within their range") {
  CHECK(parse_integer("5", "--n", 0, 10) == 5);
  CHECK(parse_integer(" 5 ", "--n", 0, 10) == 5);  // blanks around, as Python's int()
  CHECK(parse_integer("+5", "--n", 0, 10) == 5);
  CHECK(parse_integer("-0", "--n", 0, 10) == 0);
  CHECK(parse_integer("0", "--n", 0, 10) == 0);
  CHECK(parse_integer("10", "--n", 0, 10) == 10);
  CHECK(parse_integer("-9223372036854775808", "DELTA", std::numeric_limits<std::int64_t>::min(),
                      std::numeric_limits<std::int64_t>::max()) ==
        std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("bad whole numbers name the setting and the range") {
  for (const char* text : {"", " ", "-1", "11", "1e3", "0x10", "5s", "5 5", "inf", "nan", "1.5",
                           "+-5", "++5", "99999999999999999999", "-99999999999999999999"}) {
    INFO("text: '" << text << "'");
    std::string error = error_of([&] { parse_integer(text, "--max-restarts", 0, 10); });
    CHECK(error == "--max-restarts: '" + std::string(text) +
                       "' is not a whole number from 0 to 10");
  }
}

TEST_CASE("durations are seconds rounded to the millisecond") {
  duration_limits with_zero{true, max_duration_s};
  duration_limits positive{false, max_duration_s};
  CHECK(parse_duration_seconds("30", "--t", with_zero) == milliseconds(30000));
  CHECK(parse_duration_seconds("0.5", "--t", positive) == milliseconds(500));
  CHECK(parse_duration_seconds("1e3", "--t", positive) == milliseconds(1000000));
  CHECK(parse_duration_seconds(" 5", "--t", positive) == milliseconds(5000));
  CHECK(parse_duration_seconds("0.001", "--t", positive) == milliseconds(1));
  CHECK(parse_duration_seconds("0", "--t", with_zero) == milliseconds(0));
  CHECK(parse_duration_seconds("-0", "--t", with_zero) == milliseconds(0));
  CHECK(parse_duration_seconds("315360000", "--t", positive) == milliseconds(315360000000LL));
}

TEST_CASE("bad durations name the setting and the range") {
  duration_limits with_zero{true, max_duration_s};
  duration_limits positive{false, max_duration_s};
  for (const char* text : {"", "nan", "inf", "-inf", "-1", "1e300", "1e20", "315360001", "5s",
                           "0x10", "1,5", "five", "1e400"}) {
    INFO("text: '" << text << "'");
    CHECK(error_of([&] { parse_duration_seconds(text, "--stop-timeout", with_zero); }) ==
          "--stop-timeout: '" + std::string(text) +
              "' is not a number of seconds from 0 to 315360000 (10 years)");
  }
  // Where 0 would be a busy loop or an instant failure, the least is 1 ms.
  for (const char* text : {"0", "-0", "0.0004", "1e-9"}) {
    INFO("text: '" << text << "'");
    CHECK(error_of([&] {
            parse_duration_seconds(text, "--rdzv-conf keep_alive_interval", positive);
          }) == "--rdzv-conf keep_alive_interval: '" + std::string(text) +
                    "' is not a number of seconds from 0.001 to 315360000 (10 years)");
  }
}

TEST_CASE("seconds held as a double are checked the same way") {
  duration_limits with_zero{true, max_duration_s};
  CHECK(seconds_to_duration(2.5, "--t", with_zero) == milliseconds(2500));
  CHECK_THROWS_AS(seconds_to_duration(std::numeric_limits<double>::quiet_NaN(), "--t", with_zero),
                  usage_error);
  CHECK_THROWS_AS(seconds_to_duration(std::numeric_limits<double>::infinity(), "--t", with_zero),
                  usage_error);
  CHECK_THROWS_AS(seconds_to_duration(1e300, "--t", with_zero), usage_error);
  CHECK_THROWS_AS(seconds_to_duration(-1, "--t", with_zero), usage_error);
}

TEST_CASE("the longest duration cannot overflow a steady clock deadline") {
  // The timers add a duration to steady_clock::now() in nanoseconds.
  auto longest = std::chrono::duration_cast<std::chrono::nanoseconds>(
      parse_duration_seconds("315360000", "--t", {false, max_duration_s}));
  auto now = std::chrono::steady_clock::now().time_since_epoch();
  CHECK(longest.count() < std::chrono::nanoseconds::max().count() - now.count());
}
