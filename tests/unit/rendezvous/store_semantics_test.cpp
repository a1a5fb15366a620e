#include <catch2/catch.hpp>

#include "rendezvous/store/store_semantics.h"

using namespace dtrun::rendezvous;

TEST_CASE("compare_set follows PyTorch in all four cases") {
  auto missing_empty = decide_compare_set(nullptr, "", "new");
  CHECK(missing_empty.store_desired);
  CHECK(missing_empty.reply == "new");

  auto missing_expected = decide_compare_set(nullptr, "old", "new");
  CHECK_FALSE(missing_expected.store_desired);
  CHECK(missing_expected.reply == "old");

  std::string current = "old";
  auto equal = decide_compare_set(&current, "old", "new");
  CHECK(equal.store_desired);
  CHECK(equal.reply == "new");

  auto different = decide_compare_set(&current, "other", "new");
  CHECK_FALSE(different.store_desired);
  CHECK(different.reply == "old");
}

TEST_CASE("add parses the stored value like std::stoll") {
  auto at = [](std::string v, std::int64_t delta) { return add_to_counter(&v, delta); };
  CHECK(add_to_counter(nullptr, 5) == 5);
  CHECK(at("10", -3) == 7);
  CHECK(at("  42", 1) == 43);
  CHECK(at("+7", 1) == 8);
  CHECK(at("-7", 1) == -6);
  CHECK(at("12abc", 1) == 13);  // trailing bytes ignored, as stoll does
  CHECK(at("abc", 1) == std::nullopt);
  CHECK(at("", 1) == std::nullopt);
  CHECK(at("+-3", 1) == std::nullopt);
  CHECK(at("9223372036854775807", 1) == std::nullopt);  // overflow is an error
  CHECK(at("99999999999999999999", 0) == std::nullopt);
}
