#include <sys/wait.h>

#include <csignal>

#include <catch2/catch.hpp>

#include "agent/spec/exit_status.h"

using namespace dtrun::agent;

TEST_CASE("exit codes pass through and signals become 128+n") {
  CHECK(decode_wait_status(0).code == 0);
  CHECK(decode_wait_status(0).ok());
  CHECK(decode_wait_status(3 << 8).code == 3);
  CHECK(decode_wait_status(255 << 8).code == 255);
  exit_status killed = decode_wait_status(SIGKILL);
  CHECK(killed.code == 137);
  CHECK(killed.signal == SIGKILL);
  CHECK_FALSE(killed.ok());
  CHECK(decode_wait_status(SIGSEGV | 0x80).code == 139);  // with core dump bit
}

TEST_CASE("signals are named and parsed in every spelling") {
  CHECK(signal_name(SIGTERM) == "SIGTERM");
  CHECK(signal_name(SIGUSR1) == "SIGUSR1");
  CHECK(signal_name(SIGRTMIN + 3).rfind("signal ", 0) == 0);
  CHECK(parse_signal("SIGUSR2") == SIGUSR2);
  CHECK(parse_signal("usr1") == SIGUSR1);
  CHECK(parse_signal("15") == SIGTERM);
  CHECK(parse_signal("SIGNOPE") == 0);
  CHECK(parse_signal("") == 0);
  CHECK(parse_signal("99999") == 0);
}

TEST_CASE("descriptions say what happened") {
  CHECK(describe({3, 0}) == "exited with code 3");
  CHECK(describe({137, SIGKILL}) == "was killed by signal 9 (SIGKILL)");
}

TEST_CASE("exec failures map to 127 (not found) and 126 (not executable)") {
  CHECK(exec_failure_code(ENOENT) == 127);
  CHECK(exec_failure_code(ENOTDIR) == 127);
  CHECK(exec_failure_code(EACCES) == 126);
  CHECK(exec_failure_code(ENOEXEC) == 126);
}
