// Dumps captured from real Pythons (tests/fixtures/stacks/: the hook's
// header line, then faulthandler's dump), and hand-made edge cases.
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/watch/stack_dump.h"

using namespace dtrun::agent;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(DTRUN_STACK_FIXTURES) + "/" + name);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct parsed {
  hook_header header;
  python_dump dump;
};

parsed parse_fixture(const std::string& name) {
  std::string text = fixture(name);
  auto found = find_last_header(text);
  REQUIRE(found);
  return {found->header, parse_dump(std::string_view(text).substr(found->end), found->header)};
}

}  // namespace

TEST_CASE("the hook's header line is read, and only that line") {
  auto h = parse_hook_header(
      "dtrun-stack-hook pid=24035 main_thread=0x00007f03bfc3b040 signal=37 python=3.11.2 "
      "main=/tmp/my dir/w.py");
  REQUIRE(h);
  CHECK(h->pid == 24035);
  CHECK(h->main_thread == "0x00007f03bfc3b040");
  CHECK(h->signal == 37);
  CHECK(h->python == "3.11.2");
  CHECK(h->main == "/tmp/my dir/w.py");
  CHECK_FALSE(parse_hook_header("dtrun-stack-hook pid=x main_thread=0x1 signal=37"));
  CHECK_FALSE(parse_hook_header("dtrun-stack-hook pid=-4 main_thread=0x1 signal=37"));
  CHECK_FALSE(parse_hook_header("dtrun-stack-hook pid=4 signal=37"));
  CHECK_FALSE(parse_hook_header("Thread 0x00007f03bfc3b040 (most recent call first):"));
}

TEST_CASE("the last finished header of a stack file wins") {
  std::string text =
      "dtrun-stack-hook pid=1 main_thread=0x1 signal=37 python=3.11.2 main=-c\n"
      "Current thread 0x1 (most recent call first):\n"
      "dtrun-stack-hook pid=2 main_thread=0x2 signal=37 python=3.11.2 main=-c\n"
      "dtrun-stack-hook pid=3 main_thread=0x3 sig";
  auto found = find_last_header(text);
  REQUIRE(found);
  CHECK(found->header.pid == 2);
  CHECK(text.substr(found->end).rfind("dtrun-stack-hook pid=3", 0) == 0);
  CHECK_FALSE(find_last_header("no header\n"));
}

TEST_CASE("a script's dump: threads newest first, the main thread last and known by its ident") {
  for (const char* name : {"py311_script.txt", "py313_script.txt"}) {
    INFO(name);
    auto [header, dump] = parse_fixture(name);
    REQUIRE(dump.threads.size() == 2);
    CHECK(dump.complete);
    const python_thread* m = dump.main_thread();
    REQUIRE(m == &dump.threads[1]);
    CHECK(m->current);
    CHECK(m->ident == header.main_thread);
    REQUIRE(m->frames.size() == 2);
    CHECK(m->frames[0] == stack_frame{"/tmp/stk/w.py", 4, "load_batch"});
    CHECK(dump.threads[0].frames.size() == 4);
    CHECK(innermost(dump) == stack_frame{"/tmp/stk/w.py", 4, "load_batch"});
    CHECK(innermost_user(dump) == innermost(dump));
  }
}

TEST_CASE("a -m module's dump ends at runpy's _run_module_as_main") {
  for (const char* name : {"py311_module.txt", "py313_module.txt"}) {
    INFO(name);
    auto [header, dump] = parse_fixture(name);
    CHECK(header.main == "-m");
    CHECK(dump.complete);
    CHECK(innermost(dump)->function == "load_batch");
    CHECK(dump.main_thread()->frames.back().function == "_run_module_as_main");
  }
}

TEST_CASE("a dump cut at faulthandler's 100 frames is complete (3.11 says ..., 3.13 nothing)") {
  for (const char* name : {"py311_deep.txt", "py313_deep.txt"}) {
    INFO(name);
    auto [header, dump] = parse_fixture(name);
    CHECK(dump.main_thread()->frames.size() == 100);
    CHECK(dump.complete);
  }
}

TEST_CASE("a dump being written is not complete until the main thread's outermost frame") {
  std::string text = fixture("py311_module.txt");
  auto found = find_last_header(text);
  REQUIRE(found);
  std::string_view body = std::string_view(text).substr(found->end);
  // Every prefix short of the last line is unfinished; a half line is not read.
  std::size_t last = body.rfind('\n', body.size() - 2) + 1;
  for (std::size_t n = 0; n < body.size(); ++n) {
    INFO(n);
    CHECK(parse_dump(body.substr(0, n), found->header).complete == false);
  }
  CHECK(last < body.size());
  CHECK(parse_dump(body, found->header).complete);
  // A script's <module> completes only when it is the main script's, not
  // one being imported.
  hook_header h = found->header;
  h.main = "/srv/train.py";
  h.main_thread = "0x1";
  std::string importing =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/srv/model.py\", line 3 in <module>\n";
  CHECK_FALSE(parse_dump(importing, h).complete);
  CHECK(parse_dump(importing + "  File \"/srv/train.py\", line 9 in <module>\n", h).complete);
  CHECK(parse_dump("Current thread 0x1 (most recent call first):\n  <no Python frame>\n", h).complete);
}

TEST_CASE("user code is told from the standard library, installed packages and torch") {
  CHECK(is_user_file("/tmp/stk/w.py"));
  CHECK_FALSE(is_user_file("/tmp/run_x/python/modules/dtrun.py"));  // dtrun's wrappers
  CHECK(is_user_file("/home/a/lib/project/train.py"));
  CHECK(is_user_file("<string>"));
  CHECK(is_user_file("/srv/python3.11/x.py"));
  CHECK_FALSE(is_user_file("<frozen runpy>"));
  CHECK_FALSE(is_user_file("/usr/lib/python3.11/threading.py"));
  CHECK_FALSE(is_user_file("/usr/local/lib/python3.13/selectors.py"));
  CHECK_FALSE(is_user_file("/opt/conda/lib/python3.10/multiprocessing/queues.py"));
  CHECK_FALSE(is_user_file("/venv/lib/python3.12/site-packages/numpy/core/x.py"));
  CHECK_FALSE(is_user_file("/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py"));
  CHECK_FALSE(is_user_file("/src/pytorch/torch/nn/module.py"));
  CHECK_FALSE(is_user_file(""));
}

TEST_CASE("ranks are listed compactly") {
  CHECK(format_ranks({3}) == "rank 3");
  CHECK(format_ranks({3, 0, 2}) == "ranks 0,2,3");
  CHECK(format_ranks({7, 6, 5, 4, 3, 2, 1, 0}) == "ranks 0-7");
  CHECK(format_ranks({0, 1, 2, 3, 5, 5}) == "ranks 0-3,5");
}

TEST_CASE("the hang summary groups ranks by where real torch workers are stuck") {
  for (const char* version : {"py311", "py313"}) {
    INFO(version);
    auto [h0, d0] = parse_fixture(std::string(version) + "_torch.r0.txt");
    auto [h1, d1] = parse_fixture(std::string(version) + "_torch.r1.txt");
    std::vector<rank_stack> ranks;
    for (int rank : {0, 2, 3}) ranks.push_back({rank, true, d0.complete, innermost(d0), innermost_user(d0), ""});
    ranks.push_back({1, true, d1.complete, innermost(d1), innermost_user(d1), ""});
    ranks.push_back({5, false, true, std::nullopt, std::nullopt, "clock_nanosleep@GLIBC_2.2.5"});
    int barrier_line = std::string(version) == "py311" ? 3152 : 4556;
    CHECK(hang_summary(ranks) ==
          "ranks 0,2,3: barrier (distributed_c10d.py:" + std::to_string(barrier_line) +
              ") called from train_step (torchhang.py:8)\n"
              "rank 1: load_batch (torchhang.py:4)\n"
              "rank 5: no Python stack (not a Python worker, or its hook did not load); native: "
              "clock_nanosleep@GLIBC_2.2.5\n");
  }
}

TEST_CASE("the hang summary escapes what workers wrote and says when a dump is unfinished") {
  rank_stack r{0, true, false, stack_frame{"/x/\x1b[2Jevil.py", 1, "f\nrank 9: forged"}, std::nullopt, ""};
  std::string s = hang_summary({r});
  CHECK(s == "rank 0: f\\nrank 9: forged (\\x1b[2Jevil.py:1) (dump incomplete)\n");
  CHECK(hang_summary({rank_stack{4, true, true, std::nullopt, std::nullopt, ""}}) ==
        "rank 4: no Python frame in the main thread; native: unknown\n");
}
