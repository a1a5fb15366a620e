#include <unistd.h>

#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/report/agent_log.h"
#include "agent/report/failure_hint.h"
#include "agent/report/failure_report.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
namespace fs = std::filesystem;

namespace {

failure_record record(int node, int rank, std::int64_t time_ms, std::string message = "") {
  failure_record r;
  r.round = 2;
  r.host = "h" + std::to_string(node + 1);
  r.node_rank = node;
  r.local_rank = rank % 2;
  r.rank = rank;
  r.pid = 1000 + rank;
  r.exit_code = 1;
  r.time_ms = time_ms;
  r.message = std::move(message);
  if (!r.message.empty()) r.error_file = "/logs/attempt_2/" + std::to_string(r.local_rank) + "/error.json";
  return r;
}

summary_context context() {
  summary_context c;
  c.program = "train.py";
  c.run_id = "job1";
  c.outcome = "no restarts allowed: --max-restarts=0";
  c.this_host = "h1";
  return c;
}

}  // namespace

TEST_CASE("the root cause is the earliest failure, ties going to the lower node then rank") {
  std::vector<failure_record> f{record(0, 1, 5000), record(1, 3, 4000), record(1, 2, 4000)};
  CHECK(root_cause_index(f) == 2);
  f.push_back(record(0, 0, 4000));
  CHECK(root_cause_index(f) == 3);
}

TEST_CASE("the summary names the root cause with its message and traceback") {
  auto root = record(1, 3, 1700000000123, "ValueError: boom 42");
  root.traceback = "Traceback (most recent call last):\n  File \"w.py\", line 9, in main\nValueError: boom 42\n";
  std::vector<failure_record> f{record(0, 0, 1700000000500, "RuntimeError: peer gone"), root};
  auto ctx = context();
  ctx.stopped_ranks = {1};
  std::string s = format_summary(f, ctx);
  INFO(s);
  CHECK(s.find("job failed: train.py (run job1, round 2; no restarts allowed: --max-restarts=0)") != std::string::npos);
  CHECK(s.find("  time      : 2023-11-14T22:13:20.123Z\n") != std::string::npos);
  CHECK(s.find("  host      : h2 (node rank 1)\n") != std::string::npos);
  CHECK(s.find("  rank      : 3 (local_rank 1)\n") != std::string::npos);
  CHECK(s.find("  pid       : 1003\n") != std::string::npos);
  CHECK(s.find("  exit      : exit code 1\n") != std::string::npos);
  CHECK(s.find("  error     : ValueError: boom 42\n") != std::string::npos);
  CHECK(s.find("  traceback :\n    Traceback (most recent call last):\n      File \"w.py\", line 9, in main\n") != std::string::npos);
  CHECK(s.find("other failures (1):\n  rank 0 (local_rank 0) on h1 (node rank 0), pid 1000: exit code 1 (exit) at 22:13:20.500Z: RuntimeError: peer gone\n") != std::string::npos);
  CHECK(s.find("stopped by dtrun (not failures): rank(s) 1 on h1 (node rank 0)") != std::string::npos);
}

TEST_CASE("a signal death is named, and a missing error file gives the console hint") {
  auto r = record(0, 1, 1000);
  r.signal = SIGSEGV;
  r.exit_code = 128 + SIGSEGV;
  std::string s = format_summary({r}, context());
  INFO(s);
  CHECK(s.find("  exit      : signal 11 (SIGSEGV), exit code 139\n") != std::string::npos);
  CHECK(s.find("no error file (decorate the entrypoint with torch.distributed.elastic.multiprocessing.errors.record") != std::string::npos);
  CHECK(s.find("it went to the console of dtrun on h1") != std::string::npos);
  CHECK(s.find("--redirects 3") != std::string::npos);
  CHECK(s.find("other failures: none") != std::string::npos);
}

TEST_CASE("a failed worker without an error file shows the tail of its redirected stderr") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  fs::path rank_dir = dir.path / "attempt_0" / "1";
  fs::create_directories(rank_dir);
  {
    std::ofstream log(rank_dir / "stderr.log");
    for (int i = 0; i < 50; ++i) log << "line " << i << "\n";
    log << "fatal: out of cheese\n";
  }
  worker_exit e;
  e.host = "h1";
  e.local_rank = 1;
  e.rank = 1;
  e.pid = 42;
  e.status = {3, 0};
  e.error_file = (rank_dir / "error.json").string();
  e.rank_dir = rank_dir.string();
  auto r = make_failure_record(e);
  CHECK(r.error_file.empty());
  CHECK(r.log_file == (rank_dir / "stderr.log").string());
  REQUIRE(r.log_tail.size() == 8);
  CHECK(r.log_tail.back() == "fatal: out of cheese");
  std::string s = format_summary({r}, context());
  INFO(s);
  CHECK(s.find("  exit      : exit code 3\n") != std::string::npos);
  CHECK(s.find("  stderr    : last 8 line(s) of " + r.log_file + ":\n") != std::string::npos);
  CHECK(s.find("    fatal: out of cheese\n") != std::string::npos);
}

TEST_CASE("a record reads the worker's error file") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  auto file = dir.path / "error.json";
  std::ofstream(file) << R"({"message": {"message": "ValueError: boom 42", "extraInfo": {"py_callstack": "tb", "timestamp": "7"}}})";
  worker_exit e;
  e.status = {1, 0};
  e.error_file = file.string();
  e.rank_dir = dir.path.string();
  auto r = make_failure_record(e);
  CHECK(r.message == "ValueError: boom 42");
  CHECK(r.traceback == "tb");
  CHECK(r.error_time == std::optional<std::int64_t>(7));
  CHECK(r.error_file == file.string());
}

TEST_CASE("records survive the trip through JSON, and junk is refused") {
  auto r = record(1, 3, 123, "ValueError: boom 42");
  r.signal = SIGSEGV;
  r.log_tail = {"a", "b"};
  r.error_time = 99;
  auto back = failure_from_json(to_json(r).dump());
  REQUIRE(back);
  CHECK(back->host == "h2");
  CHECK(back->rank == 3);
  CHECK(back->signal == SIGSEGV);
  CHECK(back->time_ms == 123);
  CHECK(back->message == "ValueError: boom 42");
  CHECK(back->log_tail == std::vector<std::string>{"a", "b"});
  CHECK(back->error_time == std::optional<std::int64_t>(99));
  CHECK_FALSE(failure_from_json("not json"));
  CHECK_FALSE(failure_from_json("[1, 2]"));
  // Fields of the wrong type are left at their defaults.
  auto odd = failure_from_json(R"({"rank": "three", "host": "h9"})");
  REQUIRE(odd);
  CHECK(odd->rank == 0);
  CHECK(odd->host == "h9");
}

TEST_CASE("the summary stays on one screen when many workers fail") {
  std::vector<failure_record> f;
  for (int i = 0; i < 40; ++i) f.push_back(record(i / 8, i, 1000 + i, "RuntimeError: x"));
  f[0].traceback = std::string();
  for (int i = 0; i < 100; ++i) f[0].traceback += "  frame " + std::to_string(i) + "\n";
  auto ctx = context();
  ctx.published = 70;
  std::string s = format_summary(f, ctx);
  INFO(s);
  auto lines = std::count(s.begin(), s.end(), '\n');
  CHECK(lines < 45);
  CHECK(s.find("other failures (69):") != std::string::npos);
  CHECK(s.find("... and 61 more") != std::string::npos);
  CHECK(s.find("earlier line(s) left out") != std::string::npos);
  CHECK(s.find("  frame 99") != std::string::npos);
}

TEST_CASE("the log tail reads a bounded amount from the end") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  auto file = dir.path / "big.log";
  {
    std::ofstream out(file);
    for (int i = 0; i < 100000; ++i) out << "line " << i << "\n";
  }
  auto tail = read_log_tail(file.string(), 3, 64);
  CHECK(tail == std::vector<std::string>{"line 99997", "line 99998", "line 99999"});
  CHECK(read_log_tail((dir.path / "missing.log").string()).empty());
}

namespace {

// The summary as the user sees it: through the agent's log, each line
// prefixed "dtrun: ".
std::vector<std::string> printed_lines(const std::string& summary) {
  std::string out;
  agent_log log(verbosity::normal, [&out](const std::string& text) { out += text; });
  log.block(summary);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    lines.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool has_control(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("outside text in the summary is escaped and cannot forge a line") {
  const std::string forged = "\x1b[2K\rFAKE dtrun: job succeeded\n";
  auto root = record(0, 0, 1000, "ValueError: " + forged + "tail \xff");
  root.host = "evil\x1b]0;title\x07host";
  root.traceback = "Traceback (most recent call last):\n" + forged + "\x1b[31m  red\r\nlast";
  auto other = record(1, 1, 2000, forged);
  other.host = "h2\nFAKE dtrun: other";
  auto ctx = context();
  ctx.stopped_ranks = {2};
  std::string s = format_summary({root, other}, ctx);
  INFO(s);
  auto lines = printed_lines(s);
  for (const auto& line : lines) {
    INFO(line);
    CHECK(line.rfind("dtrun: ", 0) == 0);
    CHECK_FALSE(has_control(line));
    CHECK(line.find("FAKE", 0) != 7);  // never right after the prefix
  }
  CHECK(s.find("  error     : ValueError: \\x1b[2K\\rFAKE dtrun: job succeeded\\ntail \\xff\n") !=
        std::string::npos);
  CHECK(s.find("  host      : evil\\x1b]0;title\\x07host (node rank 0)\n") != std::string::npos);
  // Traceback lines stay lines, each escaped and indented under the field.
  CHECK(s.find("\n    \\x1b[2K\\rFAKE dtrun: job succeeded\n") != std::string::npos);
  CHECK(s.find("\n    \\x1b[31m  red\n    last\n") != std::string::npos);
  CHECK(s.find("on h2\\nFAKE dtrun: other (node rank 1)") != std::string::npos);
}

TEST_CASE("a redirected stderr tail is escaped inside the summary") {
  auto r = record(0, 0, 1000);
  r.log_file = "/logs/0/stderr.log";
  r.log_tail = {"plain", "\x1b[2Jcleared\rFAKE dtrun: job succeeded"};
  std::string s = format_summary({r}, context());
  INFO(s);
  CHECK(s.find("    plain\n    \\x1b[2Jcleared\\rFAKE dtrun: job succeeded\n") != std::string::npos);
  for (const auto& line : printed_lines(s)) CHECK_FALSE(has_control(line));
}

TEST_CASE("an error file that is a FIFO keeps the worker's exit code and says why it was ignored") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  auto file = dir.path / "error.json";
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
  worker_exit e;
  e.status = {3, 0};
  e.error_file = file.string();
  e.rank_dir = dir.path.string();
  auto r = make_failure_record(e);  // returns: nothing blocks on the FIFO
  CHECK(r.exit_code == 3);
  CHECK(r.message.empty());
  CHECK(r.error_file == file.string());
  CHECK(r.error_file_problem == "not a regular file (a FIFO)");
  std::string s = format_summary({r}, context());
  INFO(s);
  CHECK(s.find("  exit      : exit code 3\n") != std::string::npos);
  CHECK(s.find("  error_file: " + file.string() +
               " is unusable: not a regular file (a FIFO); ignored\n") != std::string::npos);
}

TEST_CASE("a directory as the error file keeps the worker's exit code") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  auto file = dir.path / "error.json";
  fs::create_directory(file);
  worker_exit e;
  e.status = {5, 0};
  e.error_file = file.string();
  failure_record r;
  REQUIRE_NOTHROW(r = make_failure_record(e));
  CHECK(r.exit_code == 5);
  CHECK(r.error_file_problem == "not a regular file (a directory)");
}

TEST_CASE("records from the store are type checked and bounded") {
  // Anyone who reaches the store can write a record.
  auto odd = failure_from_json(
      R"({"exit_code": 1e300, "signal": -1e300, "rank": 4294967296, "pid": "12",
          "time_ms": 18446744073709551615, "error_time": 1.5, "log_tail": ["a", 7, ["b"], "c"],
          "host": ["h"], "message": {"m": 1}})");
  REQUIRE(odd);
  CHECK(odd->exit_code == 0);
  CHECK(odd->signal == 0);
  CHECK(odd->rank == 0);
  CHECK(odd->pid == -1);
  CHECK(odd->time_ms == 0);
  CHECK_FALSE(odd->error_time);
  CHECK(odd->log_tail == std::vector<std::string>{"a", "c"});
  CHECK(odd->host.empty());
  CHECK(odd->message.empty());
  nlohmann::json big{{"host", std::string(1 << 20, 'h')},
                     {"message", std::string(1 << 20, 'm')},
                     {"traceback", std::string(1 << 20, 't')},
                     {"log_tail", std::vector<std::string>(10000, "line")}};
  auto bounded = failure_from_json(big.dump());
  REQUIRE(bounded);
  CHECK(bounded->host.size() <= 1024);
  CHECK(bounded->message.size() <= 4096);
  CHECK(bounded->traceback.size() <= 8192);
  CHECK(bounded->log_tail.size() <= 64);
  CHECK_FALSE(failure_from_json(std::string(1'000'000, '[')));
  CHECK_FALSE(failure_from_json(R"({"log_tail": )" + std::string(100, '[') + std::string(100, ']') + "}"));
}

TEST_CASE("the agent's single lines are escaped too") {
  std::string out;
  agent_log log(verbosity::normal, [&out](const std::string& text) { out += text; });
  log.error("worker failed: boom\n\x1b[2KFAKE dtrun: job succeeded");
  CHECK(out == "dtrun: worker failed: boom\\n\\x1b[2KFAKE dtrun: job succeeded\n");
}

TEST_CASE("the log tail refuses a FIFO or a symbolic link in place of stderr.log") {
  testing::scoped_temp_dir dir{"dtrun_report"};
  auto fifo = dir.path / "stderr.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(read_log_tail(fifo.string()).empty());  // returns: nothing blocks
  auto link = dir.path / "link.log";
  fs::create_symlink("/dev/zero", link);
  CHECK(read_log_tail(link.string()).empty());
  worker_exit e;
  e.status = {2, 0};
  e.rank_dir = dir.path.string();
  auto r = make_failure_record(e);
  CHECK(r.log_file.empty());
  CHECK(r.log_tail.empty());
}

TEST_CASE("a worker the watchdog killed is named so in the summary and in its record") {
  auto r = record(0, 1, 1000);
  r.signal = SIGKILL;
  r.exit_code = 128 + SIGKILL;
  r.watchdog = "deadline of scope train.py#42 passed 0.5 s ago; SIGKILL sent\x1b[2J";
  std::string s = format_summary({r}, context());
  INFO(s);
  CHECK(s.find("  watchdog  : killed by dtrun's file-timer watchdog: deadline of scope "
               "train.py#42 passed 0.5 s ago; SIGKILL sent\\x1b[2J\n") != std::string::npos);
  auto back = failure_from_json(to_json(r).dump());
  REQUIRE(back);
  CHECK(back->watchdog == r.watchdog);
  auto other = record(0, 0, 2000);
  other.watchdog = "deadline of scope a#1 passed 0.0 s ago; SIGKILL sent";
  s = format_summary({r, other}, context());
  CHECK(s.find("killed by the file-timer watchdog: deadline of scope a#1") != std::string::npos);
}

TEST_CASE("the failure hint follows the cause") {
  failure_record r = record(0, 1, 1000, "ModuleNotFoundError: No module named 'torch'");
  CHECK(failure_hint(r, "/venv/bin/python3 (python3 on PATH)", "") ==
        "the workers ran /venv/bin/python3 (python3 on PATH), which cannot import torch; choose "
        "the Python that has it with --python=/path/to/python3 (or DTRUN_PYTHON), or put its "
        "folder first on PATH");
  failure_record killed = record(0, 1, 1000);
  killed.signal = SIGKILL;
  killed.exit_code = 137;
  std::string oom = failure_hint(killed, "", "/sys/fs/cgroup/job");
  CHECK(oom.find("OOM killer") != std::string::npos);
  CHECK(oom.find("Killed process 1001") != std::string::npos);
  CHECK(oom.find("/sys/fs/cgroup/job/memory.events") != std::string::npos);
  killed.hang = "no progress";  // dtrun's own SIGKILL: no OOM hint
  CHECK(failure_hint(killed, "", "").empty());
  failure_record syntax = record(0, 1, 1000);
  syntax.log_tail = {"  File \"t.py\", line 1", "SyntaxError: invalid syntax"};
  CHECK(failure_hint(syntax, "", "").rfind("the script does not compile", 0) == 0);
  CHECK(failure_hint(record(0, 1, 1000, "ValueError: boom"), "", "").empty());
}

TEST_CASE("a hint replaces the @record advice in the summary and travels in the record") {
  failure_record r = record(0, 1, 1000);
  r.hint = "look here";
  std::string text = format_summary({r}, context());
  CHECK(text.find("  hint      : look here\n") != std::string::npos);
  CHECK(text.find("@record") == std::string::npos);
  CHECK(text.find("errors.record") == std::string::npos);
  CHECK(failure_from_json(to_json(r).dump())->hint == "look here");
}

TEST_CASE("this process's cgroup v2 folder is read from /proc/self/cgroup") {
  auto root = fs::temp_directory_path() / ("dtrun_cgroup_" + std::to_string(::getpid()));
  fs::create_directories(root / "proc/self");
  std::ofstream(root / "proc/self/cgroup") << "0::/user.slice/job.scope\n";
  CHECK(own_cgroup_dir(root.string() + "/") == root.string() + "/sys/fs/cgroup/user.slice/job.scope");
  std::ofstream(root / "proc/self/cgroup") << "4:memory:/x\n";
  CHECK(own_cgroup_dir(root.string() + "/").empty());
  fs::remove_all(root);
}
