// Real workers, real signals: two hooked /usr/bin/python3 processes stuck
// in user functions and one process without a hook, captured on a real
// io_context. Readiness is a line each Python writes to a pipe after
// start-up (its hook has then written its header): no sleeps.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/process/worker_process.h"
#include "agent/python/python_hook.h"
#include "agent/watch/stack_capture.h"

#include "rendezvous/base/env_map.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
using dtrun::env_map;

namespace {

std::string capture_temp_dir() { return testing::make_temp_dir("dtrun-capture-test"); }
using testing::slurp;

// Starts a program whose stdout is a pipe; returns once it wrote a line.
pid_t start_ready(const std::string& program, std::vector<std::string> args, const env_map& env) {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  spawn_request request{program, std::move(args), env};
  request.stdout_fd = fds[1];
  spawn_result spawned = spawn_worker(request);
  ::close(fds[1]);
  REQUIRE(spawned.ok());
  char c = 0;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') {
  }
  ::close(fds[0]);
  return spawned.pid;
}

bool alive(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  std::size_t paren = stat.rfind(") ");
  return paren != std::string::npos && stat[paren + 2] != 'Z';
}

// Each says "ready" only once its main thread is inside the call it blocks
// in (another thread sees the main thread's waiter on the queue's
// condition), so a capture can never land between the line and the call.
// That thread then waits too instead of ending: faulthandler's dump of
// every thread can crash CPython when a thread ends during it.
// A script whose main thread blocks in a function named `name` (line 4).
std::string blocked_in(const std::string& name) {
  return "import queue, threading\n"
         "q = queue.Queue()\n"
         "def " + name + "():\n"
         "    q.get()\n"
         "def announce():\n"
         "    while not q.not_empty._waiters:\n"
         "        pass\n"
         "    print('ready', flush=True)\n"
         "    threading.Event().wait()\n"
         "threading.Thread(target=announce, daemon=True).start()\n" +
         name + "()\n";
}

const std::string script_a = blocked_in("load_batch");
const std::string script_b = blocked_in("train_step");

}  // namespace

TEST_CASE("a capture names where each real worker is stuck and leaves them all running") {
  if (::access("/usr/bin/python3", X_OK) != 0) { WARN("no /usr/bin/python3"); return; }
  std::string dir = capture_temp_dir();
  write_python_hook(dir + "/hook");
  std::ofstream(dir + "/stack_a.py") << script_a;
  std::ofstream(dir + "/stack_b.py") << script_b;
  env_map env{{"PATH", "/usr/bin:/bin"}};
  env_map env_a = env, env_b = env;
  add_python_hook_env(env_a, dir + "/hook", dir + "/stacks.0");
  add_python_hook_env(env_b, dir + "/hook", dir + "/stacks.1");
  pid_t a = start_ready("/usr/bin/python3", {dir + "/stack_a.py"}, env_a);
  pid_t b = start_ready("/usr/bin/python3", {dir + "/stack_b.py"}, env_b);
  // Not hooked, and its stack file holds another process's header: it
  // must not be signalled (the real-time signal would kill it).
  pid_t c = start_ready("/bin/sh", {"-c", "echo ready; exec sleep 100"}, env);
  std::ofstream(dir + "/stacks.2") << slurp(dir + "/stacks.0");

  boost::asio::io_context io;
  stack_capture capture(io);
  std::optional<std::vector<captured_stack>> got;
  auto begun = std::chrono::steady_clock::now();
  capture.capture({{0, 0, a, dir + "/stacks.0", dir + "/out.0"},
                   {1, 1, b, dir + "/stacks.1", dir + "/out.1"},
                   {2, 2, c, dir + "/stacks.2", dir + "/out.2"}},
                  [&](std::vector<captured_stack> r) { got = std::move(r); });
  CHECK(capture.busy());
  CHECK_THROWS_AS(capture.capture({}, [](auto) {}), std::logic_error);
  io.run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count();
  WARN("capture of 3 workers took " << seconds << " s");
  REQUIRE(got);
  REQUIRE(got->size() == 3);
  CHECK_FALSE(capture.busy());
  CHECK(capture.helper_pids().empty());
  const auto& ra = (*got)[0];
  const auto& rb = (*got)[1];
  const auto& rc = (*got)[2];
  CHECK(ra.hooked);
  CHECK(ra.complete);
  CHECK(rb.hooked);
  CHECK(rb.complete);
  CHECK_FALSE(rc.hooked);
  CHECK(seconds < 2.5);  // finished by the dumps' ends, not the 3 s deadline

  std::vector<rank_stack> ranks;
  for (const auto& r : *got) ranks.push_back(r.summary());
  std::string summary = hang_summary(ranks);
  INFO(summary);
  CHECK(summary.find("rank 0: wait (threading.py:") == 0);
  CHECK(summary.find("called from load_batch (stack_a.py:4)\n") != std::string::npos);
  CHECK(summary.find("rank 1: wait (threading.py:") != std::string::npos);
  CHECK(summary.find("called from train_step (stack_b.py:4)\n") != std::string::npos);
  CHECK(summary.find("rank 2: no Python stack") != std::string::npos);

  CHECK(alive(a));
  CHECK(alive(b));
  CHECK(alive(c));
  std::string out_a = slurp(dir + "/out.0");
  CHECK(out_a.find("Current thread 0x") != std::string::npos);
  CHECK(out_a.find("# native stacks (eu-stack):") != std::string::npos);
  if (find_eu_stack("/usr/bin:/bin")) {
    CHECK(out_a.find("TID " + std::to_string(a) + ":") != std::string::npos);
    CHECK(summary.find("rank 2: no Python stack (not a Python worker, or its hook did not load); "
                       "native: ") != std::string::npos);
  } else {
    CHECK(out_a.find(eu_stack_missing) != std::string::npos);
  }
  // A second capture of the same workers reads only its own dump.
  got.reset();
  io.restart();
  capture.capture({{0, 0, a, dir + "/stacks.0", ""}}, [&](auto r) { got = std::move(r); });
  io.run();
  REQUIRE(got);
  CHECK((*got)[0].complete);
  // This capture's dump only: one per thread, the signalled main thread's
  // marked current.
  const auto& again = (*got)[0].python_text;
  CHECK(again.rfind("Thread 0x", 0) == 0);
  CHECK(again.find("Current thread 0x") != std::string::npos);
  CHECK(again.find("Current thread 0x", again.find("Current thread 0x") + 1) == std::string::npos);
  testing::kill_and_reap(a);
  testing::kill_and_reap(b);
  testing::kill_and_reap(c);
}

TEST_CASE("a worker that is gone is reported as exited, and destroying a capture stops it quietly") {
  boost::asio::io_context io;
  spawn_result gone = spawn_worker({"/bin/true", {}, {{"PATH", "/bin"}}});
  REQUIRE(gone.ok());
  int status = 0;
  REQUIRE(::waitpid(gone.pid, &status, 0) == gone.pid);
  std::optional<std::vector<captured_stack>> got;
  stack_capture capture(io);
  capture.capture({{0, 3, gone.pid, "/nonexistent", ""}}, [&](auto r) { got = std::move(r); });
  io.run();
  REQUIRE(got);
  CHECK((*got)[0].exited);
  CHECK(hang_summary({(*got)[0].summary()}) ==
        "rank 3: no Python stack (not a Python worker, or its hook did not load); native: the "
        "worker had exited\n");

  io.restart();
  bool called = false;
  pid_t sleeper = ::getpid();  // never signalled: no stack file
  {
    stack_capture doomed(io);
    doomed.capture({{0, 0, sleeper, "", ""}}, [&](auto) { called = true; });
  }
  io.run();
  CHECK_FALSE(called);
}

TEST_CASE("a FIFO a worker puts in place of its stack file or its stacks file does not block") {
  // A worker owns its folder. Once signalled, its stack file becomes a
  // FIFO (its dump goes to the old file), and the capture's output file
  // is one from the start. Opening either with no one at the other end
  // blocks: the agent's event loop would stop for good.
  if (::access("/usr/bin/python3", X_OK) != 0) { WARN("no /usr/bin/python3"); return; }
  std::string dir = capture_temp_dir();
  write_python_hook(dir + "/hook");
  std::ofstream(dir + "/stack_a.py") << script_a;
  std::string stack_file = dir + "/stacks.0", out_file = dir + "/out.0";
  env_map env{{"PATH", "/usr/bin:/bin"}};
  add_python_hook_env(env, dir + "/hook", stack_file);
  pid_t worker = start_ready("/usr/bin/python3", {dir + "/stack_a.py"}, env);
  REQUIRE(::mkfifo(out_file.c_str(), 0600) == 0);

  boost::asio::io_context io;
  stack_capture_options options;
  options.python_deadline = std::chrono::milliseconds(100);
  options.native = false;
  stack_capture capture(io, options);
  std::optional<std::vector<captured_stack>> got;
  capture.capture({{0, 0, worker, stack_file, out_file}}, [&](auto r) { got = std::move(r); });
  REQUIRE(::unlink(stack_file.c_str()) == 0);
  REQUIRE(::mkfifo(stack_file.c_str(), 0600) == 0);

  // Without the fix io.run() never returns; after a minute this opens both
  // FIFOs (read-write: never blocks), which frees it, and the test fails.
  std::mutex m;
  std::condition_variable cv;
  bool finished = false, had_to_free = false;
  std::thread rescue([&] {
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished; })) return;
    had_to_free = true;
    ::open(stack_file.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    ::open(out_file.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  });
  io.run();
  {
    std::lock_guard<std::mutex> lock(m);
    finished = true;
  }
  cv.notify_one();
  rescue.join();
  CHECK_FALSE(had_to_free);
  REQUIRE(got);
  const auto& r = (*got)[0];
  CHECK(r.hooked);
  // Whether the dump reached the unlinked file before the capture looked
  // is a race, and not the point: only that nothing blocked.
  CHECK_FALSE(r.error.empty());  // the output file could not be written
  CHECK(alive(worker));
  testing::kill_and_reap(worker);
}

TEST_CASE("a hooked worker that exec'd another program is not signalled") {
  // The hook wrote its header, then the Python worker exec'd a program
  // without a handler: same pid, same header, and the real-time signal's
  // default action (terminate) would kill it. "ready" comes from after
  // the exec.
  if (::access("/usr/bin/python3", X_OK) != 0) { WARN("no /usr/bin/python3"); return; }
  std::string dir = capture_temp_dir();
  write_python_hook(dir + "/hook");
  env_map env{{"PATH", "/usr/bin:/bin"}};
  add_python_hook_env(env, dir + "/hook", dir + "/stacks.0");
  pid_t worker = start_ready(
      "/usr/bin/python3",
      {"-c", "import os; os.execv('/bin/sh', ['sh', '-c', 'echo ready; exec sleep 100'])"}, env);
  REQUIRE(slurp(dir + "/stacks.0").find("dtrun-stack-hook pid=" + std::to_string(worker)) == 0);

  boost::asio::io_context io;
  stack_capture_options options;
  options.native = false;
  stack_capture capture(io, options);
  std::optional<std::vector<captured_stack>> got;
  capture.capture({{0, 0, worker, dir + "/stacks.0", dir + "/out.0"}},
                  [&](auto r) { got = std::move(r); });
  io.run();
  REQUIRE(got);
  CHECK_FALSE((*got)[0].hooked);
  CHECK(alive(worker));
  testing::kill_and_reap(worker);
}
