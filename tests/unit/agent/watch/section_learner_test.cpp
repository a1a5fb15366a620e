#include "agent/watch/section_learner.h"

#include <catch2/catch.hpp>

#include "agent/watch/section_watch.h"

namespace dtrun::agent::section_learner_test {
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

constexpr std::int64_t ns_per_s = 1'000'000'000;

// Feeds intervals 1..n of `section` (as one worker counts them).
void feed(section_learner& l, const std::string& section, std::uint64_t n, std::int64_t ns,
          std::uint64_t first = 1) {
  for (std::uint64_t i = first; i < first + n; ++i) l.observe(section, i, ns);
}

}  // namespace

TEST_CASE("section_learner: nothing is learned before min_samples intervals after the warm-up") {
  section_learner l;
  feed(l, "step", 5, 100 * ns_per_s);  // the warm-up: compilation's slow steps, skipped
  CHECK(l.samples("step") == 0);
  feed(l, "step", 19, 20 * ns_per_s, 6);
  CHECK(l.samples("step") == 19);
  CHECK_FALSE(l.timeout("step"));
  l.observe("step", 25, 20 * ns_per_s);
  CHECK(l.timeout("step") == milliseconds(60000));  // p99 20 s x 3
}

TEST_CASE("section_learner: the timeout is p99 times the margin, at least the floor") {
  section_learner l;
  feed(l, "fast", 100, ns_per_s / 10, 6);  // 100 ms steps
  CHECK(l.timeout("fast") == seconds(30));  // 0.3 s is under the floor
  section_learner p;
  // 99 intervals of 10 s and one of 1000 s: p99 (nearest rank) is 10 s.
  feed(p, "step", 99, 10 * ns_per_s, 6);
  p.observe("step", 200, 1000 * ns_per_s);
  CHECK(p.timeout("step") == seconds(30));
  feed(p, "step", 1, 1000 * ns_per_s, 201);  // two slow in 101: p99 is the slow one
  CHECK(p.timeout("step") == seconds(3000));
}

TEST_CASE("section_learner: the window keeps the last intervals") {
  section_learning rules;
  rules.window = 30;
  section_learner l(rules);
  feed(l, "step", 30, 100 * ns_per_s, 6);
  feed(l, "step", 30, 20 * ns_per_s, 36);
  CHECK(l.samples("step") == 30);
  CHECK(l.timeout("step") == seconds(60));
}

TEST_CASE("section_learner: what was learned is read back from its JSON") {
  section_learner l;
  feed(l, "step", 40, 12 * ns_per_s, 6);
  feed(l, "checkpoint", 3, 50 * ns_per_s, 6);
  auto document = l.to_json();
  CHECK(document["schema"] == "dtrun.section-timeouts/1");
  CHECK(document["sections"]["step"]["timeout_s"] == 36.0);
  CHECK(document["sections"]["checkpoint"]["timeout_s"].is_null());
  std::string error;
  auto back = section_learner::from_json(nlohmann::json::parse(document.dump()), {}, error);
  REQUIRE(back);
  CHECK(back->samples("step") == 40);
  CHECK(back->timeout("step") == seconds(36));
  CHECK(back->samples("checkpoint") == 3);
  CHECK_FALSE(section_learner::from_json(nlohmann::json::parse(R"({"schema":"other"})"), {}, error));
  CHECK(error == "not a dtrun.section-timeouts/1 document");
  // Values this dtrun would never have written are dropped, not trusted.
  auto odd = nlohmann::json::parse(
      R"({"schema":"dtrun.section-timeouts/1","sections":{"step":{"intervals_s":[1,-1,"x",1e300]}}})");
  back = section_learner::from_json(odd, {}, error);
  REQUIRE(back);
  CHECK(back->samples("step") == 1);
}

TEST_CASE("section_watch: a rank past its section's timeout is named with the section") {
  section_timeouts timeouts{{"checkpoint", {milliseconds(2000)}}, {"step", {std::nullopt}}};
  section_learner learner;
  progress_snapshot page;
  page.sections = {{"step", 0, {}}, {"checkpoint", 0, {}}};
  page.current = 1;
  page.current_since_ns = 10 * ns_per_s;
  CHECK_FALSE(overstayed(3, page, 11 * ns_per_s, timeouts, learner));
  auto late = overstayed(3, page, 12 * ns_per_s + 1, timeouts, learner);
  REQUIRE(late);
  CHECK(late->local_rank == 3);
  CHECK(late->section == "checkpoint");
  CHECK(late->timeout == milliseconds(2000));
  CHECK(late->elapsed == milliseconds(2000));
  CHECK_FALSE(late->learned);
  // "step" is auto: no timeout until learned.
  page.current = 0;
  CHECK_FALSE(overstayed(3, page, 1000 * ns_per_s, timeouts, learner));
  feed(learner, "step", 20, 20 * ns_per_s, 6);
  late = overstayed(3, page, 10 * ns_per_s + 60 * ns_per_s, timeouts, learner);
  REQUIRE(late);
  CHECK(late->learned);
  CHECK(late->timeout == seconds(60));
  // A section the flag does not name has none.
  page.sections.push_back({"eval", 0, {}});
  page.current = 2;
  CHECK_FALSE(overstayed(3, page, 1000 * ns_per_s, timeouts, learner));
}

TEST_CASE("section_watch: each interval of a page is learned once, warm-up skipped") {
  section_learning rules;
  rules.warmup = 2;
  section_learner learner(rules);
  progress_snapshot page;
  page.sections = {{"step", 3, {1, 2, 3}}};
  std::vector<std::uint64_t> seen;
  CHECK(learn_from(page, seen, learner) == 3);
  CHECK(learner.samples("step") == 1);  // intervals 1 and 2 are the warm-up
  CHECK(learn_from(page, seen, learner) == 0);
  // 12 more since: the ring holds the last 8, the 4 before are gone.
  page.sections[0].count = 15;
  page.sections[0].recent = {8, 9, 10, 11, 12, 13, 14, 15};
  CHECK(learn_from(page, seen, learner) == 8);
  CHECK(learner.samples("step") == 9);
  // A new worker process counts from 0 again.
  page.sections[0].count = 1;
  page.sections[0].recent = {7};
  CHECK(learn_from(page, seen, learner) == 0);
  page.sections[0].count = 3;
  page.sections[0].recent = {7, 7, 7};
  CHECK(learn_from(page, seen, learner) == 2);
}

}  // namespace dtrun::agent::section_learner_test
