// A hang report from the workers' stacks (where each is, the culprits),
// without processes (agent/watch/hang_report.h).
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/watch/hang_report.h"

using namespace dtrun::agent;

namespace {

// A hooked worker whose main thread's innermost frame is `file`:`line`.
captured_stack at(int local_rank, const std::string& file, int line, const std::string& function) {
  captured_stack c;
  c.local_rank = local_rank;
  c.rank = local_rank;
  c.pid = 1000 + local_rank;
  c.hooked = true;
  c.complete = true;
  c.python_text = "Thread 0x1 (most recent call first):\n";
  c.innermost = stack_frame{file, line, function};
  return c;
}

const std::string collective =
    "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";

}  // namespace

TEST_CASE("hang culprits: the rank stuck apart from the others") {
  // Three ranks wait in the all-reduce; rank 2 is in its data loading.
  std::vector<captured_stack> stacks = {at(0, collective, 2050, "all_reduce"),
                                        at(1, collective, 2050, "all_reduce"),
                                        at(2, "/job/train.py", 42, "load_batch"),
                                        at(3, collective, 2050, "all_reduce")};
  CHECK(hang_culprits(stacks, {0, 1, 2, 3}) == std::set<int>{2});
}

TEST_CASE("hang culprits: between groups of one size, those in their own code") {
  // Two pairs: one in the training script, one in torch.
  std::vector<captured_stack> stacks = {at(0, "/job/train.py", 42, "load_batch"),
                                        at(1, "/job/train.py", 42, "load_batch"),
                                        at(2, collective, 2050, "all_reduce"),
                                        at(3, collective, 2050, "all_reduce")};
  CHECK(hang_culprits(stacks, {0, 1, 2, 3}) == std::set<int>{0, 1});
}

TEST_CASE("hang culprits: every live worker when nobody stands apart") {
  SECTION("all in one place") {
    std::vector<captured_stack> stacks = {at(0, collective, 2050, "all_reduce"),
                                          at(1, collective, 2050, "all_reduce")};
    CHECK(hang_culprits(stacks, {0, 1}) == std::set<int>{0, 1});
  }
  SECTION("groups alike: each rank somewhere else in a library") {
    std::vector<captured_stack> stacks = {at(0, collective, 2050, "all_reduce"),
                                          at(1, collective, 2100, "barrier")};
    CHECK(hang_culprits(stacks, {0, 1}) == std::set<int>{0, 1});
  }
  SECTION("no stack at all") { CHECK(hang_culprits({}, {0, 3}) == std::set<int>{0, 3}); }
}

TEST_CASE("hang culprits: a worker that exited meanwhile is not judged") {
  captured_stack gone = at(1, "/job/train.py", 42, "load_batch");
  gone.exited = true;
  std::vector<captured_stack> stacks = {at(0, collective, 2050, "all_reduce"), gone,
                                        at(2, collective, 2050, "all_reduce")};
  CHECK(hang_culprits(stacks, {0, 2}) == std::set<int>{0, 2});
}

TEST_CASE("hang report: where each rank is, its stacks file, the summary and the culprits") {
  std::vector<worker> workers(3);
  for (int i = 0; i < 3; ++i) {
    workers[static_cast<std::size_t>(i)].local_rank = i;
    workers[static_cast<std::size_t>(i)].rank = 4 + i;
  }
  workers[2].state = worker_state::exited;  // gone before the capture
  captured_stack gone = at(2, "/job/train.py", 7, "main");
  gone.exited = true;
  std::vector<captured_stack> stacks = {at(0, collective, 2050, "all_reduce"),
                                        at(1, "/job/train.py", 42, "load_batch"), gone};
  hang_report report = make_hang_report(stacks, workers, [](int local_rank) {
    return local_rank < 0 ? std::string("/run/<local_rank>/stacks-1.txt")
                          : "/run/" + std::to_string(local_rank) + "/stacks-1.txt";
  });
  CHECK(report.where.at(1) == "load_batch (train.py:42)");
  CHECK(report.where.count(2) == 0);
  CHECK(report.files.at(2) == "/run/2/stacks-1.txt");
  REQUIRE(report.summary_lines.size() == 3);
  CHECK(report.summary_lines[0] ==
        "hang summary (where each rank's main thread is; stacks in "
        "/run/<local_rank>/stacks-1.txt):");
  // Two places of one rank each: the one in its own code.
  CHECK(report.culprits == std::set<int>{1});
}
