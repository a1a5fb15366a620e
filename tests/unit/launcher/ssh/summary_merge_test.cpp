#include <catch2/catch.hpp>

#include "launcher/ssh/summary_merge.h"

using namespace dtrun::launcher;
using lines = std::vector<std::string>;

namespace {
const std::string rule = "dtrun: " + std::string(72, '=');

lines block(const std::string& stopped) {
  return {rule,
          "dtrun: job failed: w.py (run r, round 0; no restarts allowed: --max-restarts=0)",
          "dtrun:   host      : h2 (node rank 1)",
          "dtrun:   rank      : 3 (local_rank 1)",
          "dtrun:   exit      : signal 11 (SIGSEGV), exit code 139",
          stopped,
          rule};
}
}  // namespace

TEST_CASE("summary rules are recognised, and nothing else") {
  CHECK(is_summary_rule(rule));
  CHECK_FALSE(is_summary_rule("dtrun: ==="));
  CHECK_FALSE(is_summary_rule("dtrun: ========== x"));
  CHECK_FALSE(is_summary_rule("h1: dtrun: ============"));
}

TEST_CASE("one summary: the first, plus the others' stopped-by-dtrun lines") {
  auto a = block("dtrun: stopped by dtrun (not failures): rank(s) 0-1 on h1 (node rank 0)");
  auto b = block("dtrun: stopped by dtrun (not failures): rank(s) 2 on h2 (node rank 1)");
  auto merged = merge_summaries({a, b, a});
  lines expected = a;
  expected.insert(expected.end() - 1,
                  "dtrun: stopped by dtrun (not failures): rank(s) 2 on h2 (node rank 1)");
  CHECK(merged == expected);
  CHECK(merge_summaries({a}) == a);
}

TEST_CASE("the root cause's exit code comes from its exit line") {
  CHECK(summary_exit_code(block("x")) == 139);
  lines plain = {rule, "dtrun:   exit      : exit code 3", rule};
  CHECK(summary_exit_code(plain) == 3);
  CHECK(summary_exit_code({rule, rule}) == std::nullopt);
  CHECK(summary_exit_code({rule, "dtrun:   exit      : exit code x", rule}) == std::nullopt);
}
