// Round records in the store (docs/rendezvous.md, "Round records", "Mixed
// versions"; issue 47): a job's failure is read from its record, never
// from its words; and a scripted peer writes what a dtrun from before
// round records wrote (its descriptor, its assignments, its sentences),
// with which this dtrun must refuse to run, in one line naming both
// formats, never reading its sentences as a decision.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "memory_cluster.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/record/round_record.h"

namespace memory_cluster {

namespace {

using dtrun::records::version_mismatch_line;

const rendezvous_keys keys("job1");

// A descriptor as dtrun wrote it before round records: no "records".
const std::string older_descriptor =
    R"({"addr":"10.0.0.9","host":"oldhost","pid":7,"nproc":1,"prev_rank":-1,)"
    R"("master_port":0,"worker_store_port":0})";

// A client of the memory store, connected, for the scripted peer.
std::shared_ptr<round_store> older_peer(cluster& c) {
  auto peer = c.store.client();
  peer->connect([](store_result) {});
  return peer;
}

void check_refusal_stored(cluster& c, const std::string& line) {
  // In the older dtrun's own words: a refused failure ("not restarted:"),
  // which it reads from `failed` once it rejoins, and the same end of the
  // round for an older node that started it.
  auto failed = c.store.value(keys.failed()).value_or("(absent)");
  CHECK_THAT(failed, Catch::StartsWith("node ") &&
                         Catch::EndsWith(": not restarted: " + line));
  CHECK(c.store.value(keys.over(0)).value_or("(absent)") == failed);
  CHECK(c.store.value(keys.failed_round()).value_or("(absent)") == "0");
}

}  // namespace

TEST_CASE("an older dtrun's node in the round: the closer refuses, naming both formats",
          "[dynamic_rendezvous][versions]") {
  cluster c;
  auto peer = older_peer(c);
  round_result result;
  // The older node arrives first; this one, the MAX-th, closes the round.
  peer->add(keys.joined(0), 1, [&](store_result n) {
    REQUIRE(n.number == 1);
    peer->set(keys.node(0, 1), older_descriptor, [&](store_result) {
      join(c.add(2, 2), result, [&] { c.shutdown_all(); });
    });
  });
  c.io.run();
  REQUIRE(result.done);
  REQUIRE(result.error);
  auto line = version_mismatch_line(0, "a node of round 0 (host oldhost)");
  CHECK(message_of(result.error) == line);
  CHECK(line.find("writes sentences (format 0") != std::string::npos);
  CHECK(line.find("round records of format 1") != std::string::npos);
  check_refusal_stored(c, line);
}

TEST_CASE("a round an older dtrun closed: its assignment has no format, and this node refuses",
          "[dynamic_rendezvous][versions]") {
  cluster c;
  auto peer = older_peer(c);
  round_result result;
  join(c.add(2, 2), result, [&] { c.shutdown_all(); });
  // Once this node has announced itself (arrival 1), the older node
  // arrives and closes the round as it did: assignments without formats.
  peer->wait({keys.node(0, 1)}, std::chrono::seconds(10), [&](store_result w) {
    REQUIRE_FALSE(w.error);
    peer->add(keys.joined(0), 1, [&](store_result n) {
      REQUIRE(n.number == 2);
      peer->set(keys.node(0, 2), older_descriptor, [](store_result) {});
      peer->compare_set(keys.closing(0), "", "2", [](store_result) {});
      peer->multi_set(
          {keys.assignment(0, 1), keys.assignment(0, 2), keys.closed(0)},
          {R"({"rank":1,"first":1,"nproc":1,"world":2,"rank0_addr":"10.0.0.9",)"
           R"("rank0_port":0,"worker_port":0,"next":2})",
           R"({"rank":0,"first":0,"nproc":1,"world":2,"rank0_addr":"10.0.0.9",)"
           R"("rank0_port":0,"worker_port":0,"next":1})",
           "2"},
          [](store_result) {});
    });
  });
  c.io.run();
  REQUIRE(result.done);
  REQUIRE(result.error);
  auto line = version_mismatch_line(0, "the node that closed round 0");
  CHECK(message_of(result.error) == line);
  check_refusal_stored(c, line);
  // Its group rank, as the older closer assigned it.
  CHECK_THAT(c.store.value(keys.failed()).value_or(""), Catch::StartsWith("node 1: "));
}

TEST_CASE("a job an older dtrun failed: its sentence is shown, not read as a failure",
          "[dynamic_rendezvous][versions]") {
  cluster c;
  auto peer = older_peer(c);
  round_result result;
  // Words that today's decisions would once have read: a refusal ("not
  // restarted:") and a worker's failure, tag and all.
  const std::string sentence =
      "node 0: worker rank 1 exited with code 1 [exit] (not restarted: no progress)";
  peer->set(keys.failed_round(), "0", [](store_result) {});
  peer->set(keys.failed(), sentence, [&](store_result) {
    join(c.add(1, 2), result, [&] { c.shutdown_all(); });
  });
  c.io.run();
  REQUIRE(result.done);
  REQUIRE(result.error);
  auto message = message_of(result.error);
  CHECK(message ==
        version_mismatch_line(0, "the node that failed this job") + ": " + sentence);
  // Not taken for a job this version failed, refused or out of restarts.
  CHECK_FALSE(message.starts_with("the job failed on another node"));
}

TEST_CASE("an older newcomer's sentence ends a running round as no failure, said as found",
          "[dynamic_rendezvous][versions]") {
  cluster c;
  std::vector<round_result> results(2);
  std::vector<std::string> told;
  auto peer = older_peer(c);
  int joined = 0;
  for (int i = 0; i < 2; ++i) c.add(2, 2);
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&, i] {
      REQUIRE_FALSE(results[i].error);
      c.nodes[i]->watch_round([&](said why) {
        told.push_back(why);
        if (told.size() == 2) c.shutdown_all();
      });
      if (++joined < 2) return;
      peer->compare_set(keys.over(0), "", "a node is waiting to join", [](store_result) {});
    });
  }
  c.io.run();
  CHECK(told == std::vector<std::string>{"a node is waiting to join", "a node is waiting to join"});
  CHECK(c.log_count("round 0 was ended by another dtrun version") == 2);
  // No failure ended it: nothing waits for a restart count.
  CHECK_FALSE(c.store.value(keys.round_restarts(0)));
}

TEST_CASE("a job failed with \"not restarted:\" in a worker's words is no refusal: its restarts "
          "are used up",
          "[dynamic_rendezvous][records]") {
  // The words an exception or a worker's end may hold are the record's
  // detail; whether the restart policy refused is its `refused` field.
  cluster c;
  auto peer = older_peer(c);
  round_result result;
  dtrun::records::round_record failure;
  failure.kind = dtrun::records::record_kind::worker_failed;
  failure.node = 1;
  failure.rank = 2;
  failure.klass = dtrun::records::failure_class::exception;
  failure.exception_type = "ValueError";
  failure.exit_code = 1;
  failure.detail = "worker rank 2 exited with code 1: ValueError: not restarted: bad input";
  peer->set(keys.failed_round(), "0", [](store_result) {});
  peer->set(keys.failed(), dtrun::records::to_text(failure), [&](store_result) {
    join(c.add(1, 2), result, [&] { c.shutdown_all(); });
  });
  c.io.run();
  REQUIRE(result.done);
  REQUIRE(result.error);
  try {
    std::rethrow_exception(result.error);
  } catch (const job_failed_error& e) {
    CHECK_FALSE(e.refused);
    CHECK(e.round == 0);
    CHECK(std::string(e.what()) ==
          "the job failed on another node (node 1: worker rank 2 exited with code 1: ValueError: "
          "not restarted: bad input [exception:ValueError]); its restarts (--max-restarts=10) are "
          "used up");
  } catch (...) {
    FAIL("not a job_failed_error: " << message_of(result.error));
  }
  // And a refusal is one because its record says so, whatever its words.
  failure.kind = dtrun::records::record_kind::job_failed;
  failure.refused = true;
  failure.detail = "restarts would not help";
  cluster again;
  auto peer2 = older_peer(again);
  round_result refused;
  peer2->set(keys.failed(), dtrun::records::to_text(failure), [&](store_result) {
    join(again.add(1, 2), refused, [&] { again.shutdown_all(); });
  });
  again.io.run();
  REQUIRE(refused.error);
  CHECK(message_of(refused.error) ==
        "the job failed on another node (node 1: restarts would not help)");
}

}  // namespace memory_cluster
