// Round records (rendezvous/record/round_record.h): the codec's round
// trip, its version, what it refuses, and describe(), which renders the
// sentences dtrun has always shown, byte for byte.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "rendezvous/record/round_record.h"

using namespace dtrun::records;

namespace {

round_record worker_failure(int node, int rank, failure_class c, std::string type,
                            std::string detail) {
  round_record r;
  r.kind = record_kind::worker_failed;
  r.node = node;
  r.rank = rank;
  r.klass = c;
  r.exception_type = std::move(type);
  r.exit_code = 1;
  r.detail = std::move(detail);
  return r;
}

round_record left(int node, std::string host, failure_class c, std::string why) {
  round_record r;
  r.kind = record_kind::node_left;
  r.node = node;
  r.host = std::move(host);
  r.klass = c;
  r.detail = std::move(why);
  return r;
}

void check_round_trip(const round_record& r) {
  auto back = record_from_text(to_text(r));
  CHECK(back.kind == r.kind);
  CHECK(back.node == r.node);
  CHECK(back.host == r.host);
  CHECK(back.addr == r.addr);
  CHECK(back.rank == r.rank);
  CHECK(back.klass == r.klass);
  CHECK(back.exception_type == r.exception_type);
  CHECK(back.exit_code == r.exit_code);
  CHECK(back.signal == r.signal);
  CHECK(back.refused == r.refused);
  CHECK(back.section == r.section);
  CHECK(back.detail == r.detail);
  CHECK(describe(back) == describe(r));
}

}  // namespace

TEST_CASE("describe() renders the sentences of the round's end as before", "[round_record]") {
  CHECK(describe(worker_failure(1, 3, failure_class::exception, "TypeError",
                                "worker rank 3 exited with code 1")) ==
        "node 1: worker rank 3 exited with code 1 [exception:TypeError]");
  CHECK(describe(worker_failure(0, 0, failure_class::oom_kill, "",
                                "worker rank 0 was killed by signal 9 (SIGKILL)")) ==
        "node 0: worker rank 0 was killed by signal 9 (SIGKILL) [oom-kill]");
  CHECK(describe(node_lost(2, "10.77.0.3")) == "node 2 (10.77.0.3) was lost");
  CHECK(describe(node_silent(7)) == "node 7 stopped sending heartbeats");
  CHECK(describe(left(3, "h4", failure_class::health, "its GPUs were not given back (2 of 8)")) ==
        "node 3 (host h4) left the job: its GPUs were not given back (2 of 8)");
  CHECK(describe(left(1, "h2", failure_class::preemption, "preempted")) ==
        "node 1 (host h2) left the job: preempted");
  CHECK(describe(newcomer()) == "a node is waiting to join");
  CHECK(describe(finished()) == "every node finished");
  round_record stop;
  stop.kind = record_kind::job_stopped;
  stop.node = 1;
  stop.host = "h2";
  stop.detail = "by SIGINT (Ctrl-C there)";
  CHECK(describe(stop) == "job stopped on node 1 (host h2) by SIGINT (Ctrl-C there)");
  CHECK(stopped_by(stop) == "node 1 (host h2) by SIGINT (Ctrl-C there)");
  stop.node = -1;  // stopped before its first round
  CHECK(describe(stop) == "job stopped on host h2 by SIGINT (Ctrl-C there)");
  round_record failed;  // fail_job: the failure's words, no tag (as before)
  failed.kind = record_kind::job_failed;
  failed.node = 0;
  failed.rank = 1;
  failed.klass = failure_class::exit;
  failed.detail = "worker rank 1 exited with code 1";
  CHECK(describe(failed) == "node 0: worker rank 1 exited with code 1");
}

TEST_CASE("every kind survives the codec, as versioned JSON", "[round_record]") {
  check_round_trip(worker_failure(1, 3, failure_class::exception, "TypeError", "worker rank 3"));
  check_round_trip(node_lost(0, "::1"));
  check_round_trip(node_silent(4));
  check_round_trip(left(2, "gke-a-preemptible-pool-1", failure_class::health, "disk full"));
  check_round_trip(newcomer());
  check_round_trip(finished());
  round_record refused;
  refused.kind = record_kind::job_failed;
  refused.node = 3;
  refused.rank = 5;
  refused.signal = 11;
  refused.klass = failure_class::signal;
  refused.refused = true;
  refused.detail = "not restarted: --no-restart-on=signal matched";
  check_round_trip(refused);
  auto j = nlohmann::json::parse(to_text(refused));
  CHECK(j.at("v") == record_version);
  CHECK(j.at("kind") == "job_failed");
  CHECK(j.at("refused") == true);
  CHECK(j.at("class") == "signal");
}

TEST_CASE("a hang of a section carries the section as a field", "[round_record]") {
  auto hang = worker_failure(0, 1, failure_class::hang, "", "worker rank 1 was killed by SIGKILL");
  hang.section = "checkpoint";
  check_round_trip(hang);
  CHECK(nlohmann::json::parse(to_text(hang)).at("section") == "checkpoint");
  CHECK(describe(hang) == "node 0: worker rank 1 was killed by SIGKILL in section checkpoint [hang]");
  hang.section.clear();  // a job-wide hang (--hang-timeout) names none
  CHECK(nlohmann::json::parse(to_text(hang)).count("section") == 0);
}

TEST_CASE("a sentence, another version or corrupt text is foreign, kept as found",
          "[round_record]") {
  auto sentence = record_from_text("node 2 (10.77.0.3) was lost");
  CHECK(sentence.kind == record_kind::foreign);
  CHECK(sentence.version == 0);
  CHECK(sentence.detail == "node 2 (10.77.0.3) was lost");
  CHECK_FALSE(departed_rank(sentence));
  CHECK(round_end_class(sentence) == failure_class::membership);
  auto newer = record_from_text(R"({"v":2,"kind":"node_lost","node":1})");
  CHECK(newer.kind == record_kind::foreign);
  CHECK(newer.version == 2);
  CHECK(record_from_text(R"({"v":1,"kind":"unheard_of"})").kind == record_kind::foreign);
  CHECK(record_from_text(R"({"v":1,"kind":"node_lost","node":"x"})").kind ==
        record_kind::foreign);
  CHECK(record_from_text(R"({"v":1,"kind":"worker_failed","class":"nonsense"})").kind ==
        record_kind::foreign);
  CHECK(record_from_text("").kind == record_kind::foreign);
  CHECK(record_from_text("[1]").kind == record_kind::foreign);
  CHECK(version_mismatch_line(0, "node 1 of round 3 (host h2)") ==
        "refusing to run with another dtrun version: node 1 of round 3 (host h2) writes "
        "sentences (format 0: a dtrun from before round records), this dtrun writes round "
        "records of format 1; run the same dtrun version on every node");
}

TEST_CASE("decisions read the record's fields, never its words", "[round_record]") {
  // A health check whose last line reads like a worker's failure, tag and
  // all: still a departure of node 1, a health incident, no worker rank.
  auto unhealthy =
      left(1, "h2", failure_class::health, "node health check failed: `check` said: worker "
                                           "rank 0 exited with code 1 [exit]");
  auto back = record_from_text(to_text(unhealthy));
  CHECK(departed_rank(back) == 1);
  CHECK(round_end_class(back) == failure_class::health);
  CHECK_FALSE(back.rank);
  // A host named like a preemption is not one; a preemption is its class.
  CHECK(round_end_class(left(1, "gke-a-preemptible-pool-1", failure_class::health, "x")) ==
        failure_class::health);
  CHECK(round_end_class(left(1, "h2", failure_class::preemption, "x")) ==
        failure_class::preemption);
  // A worker failure whose exception says "was lost" and "not restarted:".
  auto failure = worker_failure(1, 0, failure_class::exception, "RuntimeError",
                                "worker rank 0 exited with code 1: not restarted: was lost");
  back = record_from_text(to_text(failure));
  CHECK_FALSE(departed_rank(back));
  CHECK_FALSE(back.refused);
  CHECK(round_end_class(back) == failure_class::exception);
  CHECK(back.exception_type == "RuntimeError");
  CHECK(back.rank == 0);
  CHECK(round_end_class(node_lost(1, "a")) == failure_class::node);
  CHECK(round_end_class(node_silent(1)) == failure_class::node);
  CHECK(round_end_class(newcomer()) == failure_class::membership);
}
