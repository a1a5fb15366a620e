#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "agent/spec/restart_policy.h"
#include "rendezvous/base/usage_error.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;

TEST_CASE("the no-restart-on rules take classes, exception types, exit codes and signals",
          "[restart_policy]") {
  auto rules = parse_no_restart_on(" exception:TypeError, oom-kill ,exit:93,signal:SEGV");
  REQUIRE(rules.size() == 4);
  CHECK(rules[0].text == "exception:TypeError");

  failure_facts type_error{failure_class::exception, "TypeError", 1, 0};
  REQUIRE(matching_rule(rules, type_error) != nullptr);
  CHECK(matching_rule(rules, type_error)->text == "exception:TypeError");
  failure_facts value_error{failure_class::exception, "ValueError", 1, 0};
  CHECK(matching_rule(rules, value_error) == nullptr);
  failure_facts oom{failure_class::oom_kill, "", 137, SIGKILL};
  CHECK(matching_rule(rules, oom)->text == "oom-kill");
  failure_facts code93{failure_class::exit, "", 93, 0};
  CHECK(matching_rule(rules, code93)->text == "exit:93");
  failure_facts segv{failure_class::signal, "", 139, SIGSEGV};
  CHECK(matching_rule(rules, segv)->text == "signal:SEGV");
  // exit:N is an exit code, not 128+signal.
  auto by_code = parse_no_restart_on("exit:139");
  CHECK(matching_rule(by_code, segv) == nullptr);
  // The dotted name means its last part, as failures are named.
  auto dotted = parse_no_restart_on("exception:torch.cuda.OutOfMemoryError");
  failure_facts cuda_oom{failure_class::exception, "OutOfMemoryError", 1, 0};
  CHECK(matching_rule(dotted, cuda_oom) != nullptr);
  CHECK(parse_no_restart_on("").empty());
  CHECK(parse_no_restart_on(" ").empty());
}

TEST_CASE("the no-restart-on rules refuse what it cannot match", "[restart_policy]") {
  for (const char* bad : {"oom", "node", "membership", "exit:0", "exit:256", "exit:x",
                          "exception:", "exception:3x", "exception:a-b", "signal:NOPE", "a,,b",
                          "exit:93,", "hang:1"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_no_restart_on(bad), dtrun::usage_error);
  }
  CHECK_THROWS_WITH(parse_no_restart_on("oom"),
                    Catch::Contains("'oom' is not a failure class") &&
                        Catch::Contains("exception:TypeName"));
}

TEST_CASE("the progress file is one number, read safely", "[restart_policy]") {
  dtrun::agent::testing::scoped_temp_dir dir("progress");
  auto path = (dir.path / "step").string();
  std::string problem;
  CHECK_FALSE(read_progress_file(path, problem));
  CHECK(problem == "it does not exist (yet)");

  std::ofstream(path) << " 1200\n";
  problem.clear();
  CHECK(read_progress_file(path, problem) == 1200);

  std::ofstream(path) << "12 steps";
  problem.clear();
  CHECK_FALSE(read_progress_file(path, problem));
  CHECK(problem == "'12 steps' is not a whole number of steps");

  std::ofstream(path) << std::string(100, '1');
  problem.clear();
  CHECK_FALSE(read_progress_file(path, problem));
  CHECK(problem == "it is 100 bytes, more than one number (64 at most)");

  auto fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  problem.clear();
  CHECK_FALSE(read_progress_file(fifo, problem));  // and it did not block
  CHECK(problem == "it is not a regular file");
}

TEST_CASE("only failed rounds that did not move the step count as stalls", "[restart_policy]") {
  progress_tracker t(std::nullopt);
  t.restarted(100);  // the first step seen is progress
  CHECK(t.stalls() == 0);
  t.restarted(100);
  t.restarted(90);  // resumed from an older checkpoint: still no progress
  CHECK(t.stalls() == 2);
  t.restarted(std::nullopt);  // unreadable: neither counts nor resets
  CHECK(t.stalls() == 2);
  t.restarted(101);
  CHECK(t.stalls() == 0);
  CHECK(t.best() == 101);

  progress_tracker from_start(50);
  from_start.restarted(50);
  CHECK(from_start.stalls() == 1);
}
