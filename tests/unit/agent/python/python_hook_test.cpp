// The hook is run by real Pythons (/usr/bin/python3, with Debian's own
// sitecustomize): what matters is how it behaves inside one.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/python/python_hook.h"
#include "agent/watch/stack_dump.h"

#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
using dtrun::env_map;

namespace {

std::string hook_temp_dir() { return testing::make_temp_dir("dtrun-hook-test"); }
using testing::slurp;

// Runs a shell command, returns its stdout (stderr included).
std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) out.append(buffer, n);
  ::pclose(p);
  return out;
}

std::string env_prefix(const env_map& env) {
  std::string s = "env";
  for (const auto& [k, v] : env) s += " '" + k + "=" + v + "'";
  return s;
}

bool have_python() { return ::access("/usr/bin/python3", X_OK) == 0; }

}  // namespace

TEST_CASE("the hook goes first on PYTHONPATH and names the stack file and signal") {
  env_map env;
  add_python_hook_env(env, "/run/hook", "/run/stacks/0");
  CHECK(env["PYTHONPATH"] == "/run/hook");
  CHECK(env["DTRUN_STACK_FILE"] == "/run/stacks/0");
  CHECK(env["DTRUN_STACK_SIGNAL"] == std::to_string(stack_dump_signal()));
  CHECK(env["DTRUN_STACK_TRACER"] == std::to_string(::getpid()));
  env_map with{{"PYTHONPATH", "/a:/b"}};
  add_python_hook_env(with, "/run/hook", "f");
  CHECK(with["PYTHONPATH"] == "/run/hook:/a:/b");
  env_map empty{{"PYTHONPATH", ""}};
  add_python_hook_env(empty, "/run/hook", "f");
  CHECK(empty["PYTHONPATH"] == "/run/hook");
}

TEST_CASE("the dump signal is a real-time one that Python leaves alone") {
  CHECK(stack_dump_signal() >= SIGRTMIN);
  CHECK(stack_dump_signal() <= SIGRTMAX);
}

TEST_CASE("the hook is written as a readable sitecustomize.py, directories made") {
  std::string dir = hook_temp_dir() + "/a/b";
  write_python_hook(dir);
  struct stat st {};
  REQUIRE(::stat((dir + "/sitecustomize.py").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  CHECK(slurp(dir + "/sitecustomize.py") ==
        std::string(python_hook_source()) + python_preload_source());
  write_python_hook(dir);  // again: replaced
  CHECK_THROWS_AS(write_python_hook("/proc/no/such/dir"), std::runtime_error);
}

TEST_CASE("a hooked python registers, writes its header, hides the variables and chains sitecustomize") {
  if (!have_python()) { WARN("no /usr/bin/python3"); return; }
  std::string dir = hook_temp_dir();
  write_python_hook(dir + "/hook");
  // A user's own sitecustomize further down PYTHONPATH still runs.
  ::mkdir((dir + "/user").c_str(), 0755);
  std::ofstream(dir + "/user/sitecustomize.py") << "import sys\nsys.dtrun_user_site = True\n";
  env_map env{{"PATH", "/usr/bin:/bin"}, {"PYTHONPATH", dir + "/user"}};
  add_python_hook_env(env, dir + "/hook", dir + "/stack");
  std::string out = run(env_prefix(env) +
                        " /usr/bin/python3 -c 'import os, sys; print(getattr(sys, \"dtrun_user_site\", False), "
                        "os.environ.get(\"DTRUN_STACK_FILE\"), os.getpid())'");
  CHECK(out.rfind("True None ", 0) == 0);
  auto header = find_last_header(slurp(dir + "/stack"));
  REQUIRE(header);
  CHECK(std::to_string(header->header.pid) + "\n" == out.substr(10));
  CHECK(header->header.signal == stack_dump_signal());
  CHECK(header->header.main == "-c");

  // The program sees the PYTHONPATH it was given, not the hook's folder.
  CHECK(run(env_prefix(env) + " /usr/bin/python3 -c 'import os; print(os.environ[\"PYTHONPATH\"])'") ==
        dir + "/user\n");

  // Without a user's one, Debian's (/usr/lib/python3.X/sitecustomize.py) is next.
  env["PYTHONPATH"] = dir + "/hook";
  CHECK(run(env_prefix(env) + " /usr/bin/python3 -c 'import os; print(\"PYTHONPATH\" in os.environ)'") ==
        "False\n");
  CHECK(run(env_prefix(env) + " /usr/bin/python3 -c 'import sitecustomize; print(sitecustomize.__file__)'")
            .find("/usr/lib/python3") == 0);
  // -m modules run; python -I ignores PYTHONPATH and runs without it.
  CHECK(run("echo '{\"a\": 1}' | " + env_prefix(env) + " /usr/bin/python3 -m json.tool --compact") ==
        "{\"a\":1}\n");
  CHECK(run(env_prefix(env) + " /usr/bin/python3 -I -c 'print(42)'") == "42\n");
  // A failing user sitecustomize is reported as site.py would, and the
  // program still runs.
  std::ofstream(dir + "/user/sitecustomize.py") << "raise ValueError('boom')\n";
  env["PYTHONPATH"] = dir + "/hook:" + dir + "/user";
  std::string failing = run(env_prefix(env) + " /usr/bin/python3 -c 'print(7)'");
  CHECK(failing.find("ValueError: boom") != std::string::npos);
  CHECK(failing.find("7\n") != std::string::npos);
  // A stack file it cannot open: silent, the program runs.
  env["DTRUN_STACK_FILE"] = "/proc/no/such/file";
  CHECK(run(env_prefix(env) + " /usr/bin/python3 -c 'print(8)'").find("8\n") != std::string::npos);
}

TEST_CASE("a forked child of a hooked python ignores the signal instead of dumping into the parent's file") {
  if (!have_python()) { WARN("no /usr/bin/python3"); return; }
  std::string dir = hook_temp_dir();
  write_python_hook(dir + "/hook");
  env_map env{{"PATH", "/usr/bin:/bin"}};
  add_python_hook_env(env, dir + "/hook", dir + "/stack");
  std::string sig = std::to_string(stack_dump_signal());
  std::string out = run(env_prefix(env) + " /usr/bin/python3 -c 'import os\n"
                        "pid = os.fork()\n"
                        "if pid == 0:\n"
                        "    os.kill(os.getpid(), " + sig + "); os._exit(3)\n"
                        "print(os.waitpid(pid, 0)[1] >> 8)'");
  CHECK(out == "3\n");
  std::string text = slurp(dir + "/stack");
  CHECK(text.find("Thread 0x") == std::string::npos);
}
