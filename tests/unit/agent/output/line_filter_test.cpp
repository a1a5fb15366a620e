#include <catch2/catch.hpp>

#include "agent/output/line_filter.h"
#include "agent/spec/template_substitute.h"

using namespace dtrun::agent;
using strings = std::vector<std::string>;

TEST_CASE("duplicate filters split on commas and a double comma is a literal one") {
  CHECK(parse_duplicate_filters("") == strings{});
  CHECK(parse_duplicate_filters("apple,orange") == strings{"apple", "orange"});
  CHECK(parse_duplicate_filters("a,,b,c") == strings{"a,b", "c"});
  CHECK(parse_duplicate_filters(",,") == strings{","});
  CHECK(parse_duplicate_filters(" loss ,step") == strings{" loss ", "step"});
  // Empty items would match every line: dropped.
  CHECK(parse_duplicate_filters("a,") == strings{"a"});
  CHECK(parse_duplicate_filters(",a") == strings{"a"});
}

TEST_CASE("matching lines keep their prefix and the filter ignores the prefix") {
  std::string out;
  select_matching_lines("[default0]:loss 1\n[default0]:step 2\n[default0]:grad\n", 11,
                        {"loss", "grad"}, out);
  CHECK(out == "[default0]:loss 1\n[default0]:grad\n");
  out.clear();
  // "default" is in every prefix but in no content.
  select_matching_lines("[default0]:a\n[default1]:b\n", 11, {"default"}, out);
  CHECK(out.empty());
  out.clear();
  select_matching_lines("[r1]:Loss\n[r1]:x,y\n", 5, {"loss", "x,y"}, out);
  CHECK(out == "[r1]:x,y\n");  // case-sensitive
}

TEST_CASE("safe substitute keeps what it does not know") {
  auto lookup = [](std::string_view name) -> std::optional<std::string> {
    if (name == "a") return std::string("1");
    return std::nullopt;
  };
  CHECK(safe_substitute("$a ${a} $$a $b ${b} $ ${a $1 $a1", lookup) == "1 1 $a $b ${b} $ ${a $1 $a1");
  CHECK(substitute_local_rank_macro("--x=${local_rank}", 3) == "--x=3");
  CHECK(substitute_local_rank_macro("plain", 3) == "plain");
  CHECK(substitute_local_rank_macro("kill $$ $${local_rank} $local_rank", 3) ==
        "kill $$ $${local_rank} 3");
}
