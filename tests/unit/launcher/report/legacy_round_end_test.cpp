// Event logs written before round records (launcher/report/legacy_round_end.h):
// the class of a round's end, read from the sentence an older dtrun wrote
// (these were the agent's own checks of class_of_round_end, which round
// records replaced).
#include <catch2/catch.hpp>

#include <string>

#include "launcher/report/legacy_round_end.h"

using dtrun::launcher::class_of_legacy_round_end;
using dtrun::records::failure_class;

namespace {
failure_class class_of_round_end(std::string_view reason, std::string* type = nullptr) {
  return class_of_legacy_round_end(reason, type);
}
}  // namespace

TEST_CASE("an old event log's round end tells its class in words", "[legacy_round_end]") {
  std::string type;
  CHECK(class_of_round_end("node 1: worker rank 3 exited with code 1 [exception:TypeError]",
                           &type) == failure_class::exception);
  CHECK(type == "TypeError");
  CHECK(class_of_round_end("node 0: worker rank 0 was killed by signal 9 (SIGKILL) [oom-kill]") ==
        failure_class::oom_kill);
  CHECK(class_of_round_end("node 2 (10.77.0.3) was lost") == failure_class::node);
  CHECK(class_of_round_end("node 2 stopped sending heartbeats") == failure_class::node);
  CHECK(class_of_round_end("node 1 (host h2) left the job: node health check failed") ==
        failure_class::health);
  CHECK(class_of_round_end("node 1 (host h2) left the job: preempted (SIGTERM)") ==
        failure_class::preemption);
  // The host's name or the check's words are not why it left.
  CHECK(class_of_round_end("node 1 (host gke-a-preemptible-pool-1) left the job: node health "
                           "check failed: `check_preempt.sh` exited with code 1") ==
        failure_class::health);
  CHECK(class_of_round_end("node 1 (host h2) left the job: node health check failed: `gpu-check` "
                           "exited with code 1 (last line: \"GPU 0 was lost\")") ==
        failure_class::health);
  CHECK(class_of_round_end("a node is waiting to join") == failure_class::membership);
  // A dtrun without tags: a worker failed, nothing more known.
  CHECK(class_of_round_end("node 1: worker rank 3 exited with code 1") == failure_class::exit);
  // A bracket that is no class is the worker's text, not a tag.
  CHECK(class_of_round_end("node 1: worker rank 3 exited with code 1 [x]") ==
        failure_class::exit);
}
