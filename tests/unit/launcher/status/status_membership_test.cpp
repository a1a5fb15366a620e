#include <string>

#include <catch2/catch.hpp>

#include "agent/health/quarantine_record.h"
#include "launcher/status/status_membership.h"
#include "rendezvous/algorithm/rank_table.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/store/memory_store.h"

using namespace dtrun;
using namespace dtrun::launcher;

namespace {

constexpr double test_now = 1'800'000'000;

bool membership_has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void add_record(rendezvous::memory_store& store, const rendezvous::rendezvous_keys& keys,
                int index, const std::string& host, double until) {
  agent::quarantine_record r;
  r.machine = "m-" + host + "-0123456789abcdef";
  r.host = host;
  r.quarantines = 2;
  r.since = test_now - 300;
  r.until = until;
  r.cooldown_s = 600;
  r.reason = "rank 3 failed with SIGBUS\nsecond line";
  r.rank = 3;
  r.fault = "SIGBUS";
  store.set(keys.quarantine_entry(index), r.to_json());
}

// Round 5 closed with 2 members; arrival 3 (h3) came late; one current
// and one expired quarantine record.
void fill_store(rendezvous::memory_store& store) {
  rendezvous::rendezvous_keys keys("job1");
  store.set(keys.newest_round(), "5");
  store.set(keys.joined(5), "3");
  store.set(keys.closed(5), "2");
  rendezvous::node_descriptor spare;
  spare.hostname = "h3";
  spare.addr = "10.0.0.3";
  store.set(keys.node(5, 3), rendezvous::to_text(spare));
  store.set(keys.quarantine_count(), "2");
  add_record(store, keys, 0, "h9", test_now + 100);
  add_record(store, keys, 1, "h8", test_now - 1);
}

}  // namespace

TEST_CASE("the store view lists the spares and the current quarantines", "[status]") {
  rendezvous::memory_store store;
  fill_store(store);
  auto m = read_membership(store, "job1", test_now);
  CHECK(m.round == 5);
  CHECK(m.members == 2);
  CHECK(m.spares_total == 1);
  REQUIRE(m.spares.size() == 1);
  CHECK(m.spares[0].arrival == 3);
  CHECK(m.spares[0].host == "h3");
  CHECK(m.spares[0].addr == "10.0.0.3");
  REQUIRE(m.quarantined.size() == 1);
  CHECK(m.quarantined[0].host == "h9");

  auto text = render_membership(m, 2, test_now);
  CHECK(text.rfind("nodes: 2 active, 1 spare, 1 quarantined\n", 0) == 0);
  CHECK(membership_has(text, "SPARE  HOST  ADDRESS   WAITING IN ROUND\n"
                             "3      h3    10.0.0.3  5\n"));
  CHECK(membership_has(text, "QUARANTINED  MACHINE"));
  CHECK(membership_has(text, "h9           m-h9-0123456"));
  CHECK(membership_has(text, "(in 1m40s)  2      rank 3 failed with SIGBUS\n"));
  CHECK(!membership_has(text, "h8"));  // expired
  CHECK(!membership_has(text, "second line"));

  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  add_membership_json(doc, m, 2);
  CHECK(doc["node_counts"]["active"] == 2);
  CHECK(doc["node_counts"]["spare"] == 1);
  CHECK(doc["node_counts"]["quarantined"] == 1);
  CHECK(doc["spares"][0]["host"] == "h3");
  CHECK(doc["quarantined"][0]["host"] == "h9");
  CHECK(doc["quarantined"][0]["until"] == test_now + 100);
}

TEST_CASE("without spares or quarantines only the summary line shows", "[status]") {
  rendezvous::memory_store store;
  rendezvous::rendezvous_keys keys("job1");
  store.set(keys.newest_round(), "0");
  store.set(keys.joined(0), "2");
  store.set(keys.closed(0), "2");
  auto m = read_membership(store, "job1", test_now);
  CHECK(render_membership(m, 2, test_now) == "nodes: 2 active, 0 spares, 0 quarantined\n");
  // Nothing in the store at all (an older agent): the status view's count.
  rendezvous::memory_store empty;
  CHECK(render_membership(read_membership(empty, "job1", test_now), 3, test_now) ==
        "nodes: 3 active, 0 spares, 0 quarantined\n");
}

TEST_CASE("round 0 has no `round` key: its spares are found all the same", "[status]") {
  rendezvous::memory_store store;
  rendezvous::rendezvous_keys keys("job1");
  store.set(keys.joined(0), "3");
  store.set(keys.closed(0), "2");
  auto m = read_membership(store, "job1", test_now);
  CHECK(m.round == 0);
  CHECK(m.spares_total == 1);
}

TEST_CASE("a spare whose descriptor is not written yet shows as '-'", "[status]") {
  rendezvous::memory_store store;
  rendezvous::rendezvous_keys keys("job1");
  store.set(keys.newest_round(), "1");
  store.set(keys.joined(1), "4");
  store.set(keys.closed(1), "2");
  auto m = read_membership(store, "job1", test_now);
  CHECK(m.spares_total == 2);
  REQUIRE(m.spares.size() == 2);
  CHECK(m.spares[1].arrival == 4);
  CHECK(membership_has(render_membership(m, 2, test_now), "4      -     -        1\n"));
}
