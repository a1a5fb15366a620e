#include "agent/watch/straggler_watch.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <optional>

namespace straggler_watch_test {

using namespace dtrun::agent;
using namespace std::chrono_literals;

// A job of three nodes with two ranks each, seen from one node: every
// interval each rank finished five more steps; node 2's ranks work 0.3 s a
// step, the others 0.1 s.
struct three_nodes {
  std::int64_t next_step = 21;
  std::vector<rank_work_sample> node(int g) const {
    const double own = g == 2 ? 0.3 : 0.1;
    return {{2 * g, g, next_step, next_step + 4, own}, {2 * g + 1, g, next_step, next_step + 4, own}};
  }
};

TEST_CASE("node 0 names the slow node once, publishes the verdict and holds it at once",
          "[straggler]") {
  boost::asio::io_context io;
  three_nodes job;
  std::string published;
  std::vector<named_straggler> named;
  std::vector<std::vector<named_straggler>> verdicts;
  int shares = 0;
  straggler_watch::hooks hooks;
  hooks.samples = [&] { return job.node(0); };
  hooks.share = [&](std::string work, bool gather, straggler_watch::share_done done) {
    CHECK(gather);
    ++shares;
    std::vector<std::string> per_node{work, encode_work("host-b", job.node(1)),
                                      encode_work("host-c", job.node(2))};
    job.next_step += 5;
    done(per_node, published, straggler_room{3, 0, 1});
  };
  hooks.publish = [&](std::string verdict) { published = std::move(verdict); };
  hooks.named = [&](const std::vector<named_straggler>& fresh) {
    named.insert(named.end(), fresh.begin(), fresh.end());
  };
  std::unique_ptr<straggler_watch> watch;
  hooks.verdict = [&](const std::vector<named_straggler>& now) {
    verdicts.push_back(now);
    if (verdicts.size() == 4) watch->stop();
  };
  hooks.debug = [](const std::string& line) { FAIL(line); };
  watch = std::make_unique<straggler_watch>(io, straggler_rules{}, false, hooks, 1ms);
  watch->start_round(0, 3, "host-a");
  io.run();
  CHECK(shares == 4);
  REQUIRE(named.size() == 1);  // named once, in the second interval
  CHECK(named[0].host == "host-c");
  CHECK(named[0].finding.ranks == std::vector<int>{4, 5});
  CHECK(named[0].finding.first_step == 21);
  CHECK(named[0].finding.last_step == 30);
  // Node 0 reads the verdict it wrote at once (the others an interval
  // later, from the store): named in the second interval, still in the
  // fourth, its streak grown.
  CHECK(verdicts[0].empty());
  REQUIRE(verdicts[1].size() == 1);
  CHECK(verdicts[1][0].host == "host-c");
  CHECK(verdicts[3][0].finding.last_step == 40);
  CHECK_FALSE(verdicts[3][0].leaves);  // warn: nobody is sent away
}

// The verdict node 0 reads back once node 2 is named, with
// --straggler-action leave or quarantine and `room`.
named_straggler sent_away_in(straggler_room room) {
  boost::asio::io_context io;
  three_nodes job;
  std::string published;
  std::optional<named_straggler> seen;
  straggler_watch::hooks hooks;
  hooks.samples = [&] { return job.node(0); };
  hooks.share = [&](std::string work, bool, straggler_watch::share_done done) {
    std::vector<std::string> per_node{work, encode_work("host-b", job.node(1)),
                                      encode_work("host-c", job.node(2))};
    job.next_step += 5;
    done(per_node, published, room);
  };
  hooks.publish = [&](std::string verdict) { published = std::move(verdict); };
  hooks.named = [](const std::vector<named_straggler>&) {};
  std::unique_ptr<straggler_watch> watch;
  hooks.verdict = [&](const std::vector<named_straggler>& now) {
    if (now.empty()) return;
    seen = now[0];
    watch->stop();
  };
  hooks.debug = [](const std::string& line) { FAIL(line); };
  watch = std::make_unique<straggler_watch>(io, straggler_rules{}, true, hooks, 1ms);
  watch->start_round(0, 3, "host-a");
  io.run();
  REQUIRE(seen);
  return *seen;
}

TEST_CASE("a straggler leaves when a spare takes its place or the job may go on smaller",
          "[straggler]") {
  CHECK(sent_away_in({3, 1, 3}).leaves);  // a spare
  CHECK(sent_away_in({3, 0, 2}).leaves);  // smaller: 2 nodes are enough
  named_straggler kept = sent_away_in({3, 0, 3});
  CHECK_FALSE(kept.leaves);
  CHECK(kept.kept_because ==
        "no spare node waits and the job is at --nnodes' minimum of 3 node(s), so it stays");
}

TEST_CASE("another node only shares its figures and reads the verdict; stop() ends it",
          "[straggler]") {
  boost::asio::io_context io;
  three_nodes job;
  std::string verdict = encode_stragglers({{{1, {2, 3}, true, 0.3, 0.1, 21, 30}, "host-b"}});
  std::vector<std::string> shared;
  std::vector<named_straggler> seen;
  straggler_watch::hooks hooks;
  hooks.samples = [&] { return job.node(1); };
  hooks.share = [&](std::string work, bool gather, straggler_watch::share_done done) {
    CHECK_FALSE(gather);
    shared.push_back(std::move(work));
    done({}, verdict, straggler_room{});
  };
  hooks.publish = [](std::string) { FAIL("only node 0 publishes"); };
  hooks.named = [](const std::vector<named_straggler>&) { FAIL("only node 0 names"); };
  std::unique_ptr<straggler_watch> watch;
  hooks.verdict = [&](const std::vector<named_straggler>& now) {
    seen = now;
    watch->stop();
  };
  hooks.debug = [](const std::string& line) { FAIL(line); };
  watch = std::make_unique<straggler_watch>(io, straggler_rules{}, false, hooks, 1ms);
  watch->start_round(1, 3, "host-b");
  io.run();
  REQUIRE(shared.size() == 1);
  std::string error;
  CHECK(decode_work(shared[0], error).host == "host-b");
  REQUIRE(seen.size() == 1);
  CHECK(describe(seen[0].finding, seen[0].host).rfind("node 1 (host-b) is a straggler", 0) == 0);
}

TEST_CASE("a share still in flight skips the next intervals, not for ever", "[straggler]") {
  boost::asio::io_context io;
  three_nodes job;
  int shares = 0, skipped = 0;
  std::unique_ptr<straggler_watch> watch;
  straggler_watch::hooks hooks;
  hooks.samples = [&] { return job.node(1); };
  hooks.share = [&](std::string, bool, straggler_watch::share_done) {
    // Never answered (a store error): the second share comes after 4 skips.
    if (++shares == 2) watch->stop();
  };
  hooks.publish = [](std::string) {};
  hooks.named = [](const std::vector<named_straggler>&) {};
  hooks.verdict = [](const std::vector<named_straggler>&) {};
  hooks.debug = [&](const std::string& line) {
    CHECK(line.find("still on their way") != std::string::npos);
    ++skipped;
  };
  watch = std::make_unique<straggler_watch>(io, straggler_rules{}, false, hooks, 1ms);
  watch->start_round(1, 3, "host-b");
  io.run();
  CHECK(shares == 2);
  CHECK(skipped == 4);
}

TEST_CASE("the interval grows with the job above 1,000 nodes", "[straggler]") {
  CHECK(straggler_watch::interval_for(3) == 1000ms);
  CHECK(straggler_watch::interval_for(10000) == 10000ms);
}

}  // namespace straggler_watch_test
