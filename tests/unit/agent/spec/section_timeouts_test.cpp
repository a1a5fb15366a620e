#include "agent/spec/section_timeouts.h"

#include <catch2/catch.hpp>

#include "rendezvous/base/usage_error.h"

namespace dtrun::agent::section_timeouts_test {
using std::chrono::milliseconds;

TEST_CASE("section_timeouts: seconds and auto, comma-separated") {
  auto t = parse_section_timeouts("checkpoint=600, step=auto,data.load=0.5");
  REQUIRE(t.size() == 3);
  CHECK(t.at("checkpoint").fixed == milliseconds(600000));
  CHECK_FALSE(t.at("step").fixed);
  CHECK(t.at("data.load").fixed == milliseconds(500));
  CHECK(to_text(t) == "checkpoint=600,data.load=0.5,step=auto");
}

TEST_CASE("section_timeouts: each mistake is refused in one line naming the entry") {
  auto refused = [](const char* text) {
    try {
      parse_section_timeouts(text);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused("") == "--section-timeouts: '' names no section; use NAME=SECONDS or NAME=auto, "
                       "comma-separated (e.g. checkpoint=600,step=auto)");
  CHECK_THAT(refused("checkpoint"), Catch::StartsWith("--section-timeouts: 'checkpoint' has no '='"));
  CHECK_THAT(refused("=5"), Catch::StartsWith("--section-timeouts: '=5' has no section name"));
  CHECK_THAT(refused("a=1,,b=2"), Catch::Contains("has an empty entry"));
  CHECK_THAT(refused("a=1,"), Catch::Contains("has an empty entry"));
  CHECK_THAT(refused("a=1,a=2"), Catch::StartsWith("--section-timeouts: 'a=2' names a section a second time"));
  CHECK_THAT(refused("my section=3"), Catch::Contains("characters other than letters"));
  CHECK_THAT(refused("abcdefghijklmnopqrstuvwxyz0123456=3"), Catch::Contains("longer than 31 bytes"));
  for (const char* bad : {"a=0", "a=-1", "a=5s", "a=nan", "a=inf", "a=", "a=AUTO"}) {
    INFO(bad);
    CHECK_THAT(refused(bad), Catch::StartsWith("--section-timeouts a:"));
  }
}

}  // namespace dtrun::agent::section_timeouts_test
