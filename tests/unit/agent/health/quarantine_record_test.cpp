#include <signal.h>

#include <chrono>

#include <catch2/catch.hpp>

#include "agent/health/quarantine_record.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;

TEST_CASE("a quarantine record survives the store; anything else is refused", "[quarantine]") {
  quarantine_record r;
  r.machine = "0123abcd:9f";
  r.host = "node17";
  r.quarantines = 2;
  r.since = 1000.5;
  r.until = 1120.5;
  r.cooldown_s = 120;
  r.reason = "node health check failed: `check` exited with 3";
  r.rank = 5;
  r.fault = "SIGBUS";
  auto back = quarantine_record::parse(r.to_json());
  REQUIRE(back);
  CHECK(back->machine == r.machine);
  CHECK(back->host == r.host);
  CHECK(back->quarantines == 2);
  CHECK(back->until == 1120.5);
  CHECK(back->rank == 5);
  CHECK(back->fault == "SIGBUS");
  for (const char* junk : {"", "{", "[]", "42", "{\"machine\": 3}", "\xff\xfe",
                           "{\"machine\":\"m\",\"host\":\"h\",\"quarantines\":-1,\"since\":0,"
                           "\"until\":0,\"cooldown_s\":0,\"reason\":\"\"}"}) {
    CHECK_FALSE(quarantine_record::parse(junk));
  }
}

TEST_CASE("each quarantine doubles the cooldown, up to the longest", "[quarantine]") {
  CHECK(next_cooldown(0, 60s, 1h) == 60s);
  CHECK(next_cooldown(1, 60s, 1h) == 120s);
  CHECK(next_cooldown(5, 60s, 1h) == 1920s);
  CHECK(next_cooldown(6, 60s, 1h) == 1h);
  CHECK(next_cooldown(1000000, 60s, 1h) == 1h);  // no overflow however many
}

TEST_CASE("faults that follow the machine, and those that never quarantine it", "[quarantine]") {
  CHECK(machine_fault({128 + SIGBUS, SIGBUS}, "") == "SIGBUS");
  CHECK(machine_fault({1, 0}, "CUDA error: uncorrectable ECC error encountered") == "ECC error");
  CHECK(machine_fault({1, 0}, "TypeError: unsupported operand").empty());
  CHECK(machine_fault({128 + SIGSEGV, SIGSEGV}, "").empty());
  CHECK(machine_fault({128 + SIGKILL, SIGKILL}, "").empty());
}

TEST_CASE("a fault follows the rank when it got another machine quarantined", "[quarantine]") {
  quarantine_record other;
  other.machine = "m2";
  other.rank = 3;
  other.fault = "SIGBUS";
  quarantine_record health;
  health.machine = "m3";  // a health check: no rank
  CHECK(follows_the_rank({other}, "m1", 3, "SIGBUS"));
  CHECK_FALSE(follows_the_rank({other}, "m2", 3, "SIGBUS"));  // the same machine
  CHECK_FALSE(follows_the_rank({other}, "m1", 4, "SIGBUS"));
  CHECK_FALSE(follows_the_rank({other}, "m1", 3, "ECC error"));
  CHECK_FALSE(follows_the_rank({health}, "m1", -1, "health"));
}

TEST_CASE("the --quarantine-file lists each host once, in order", "[quarantine]") {
  quarantine_record a, b, c;
  a.host = "n2";
  b.host = "n9";
  c.host = "n2";
  CHECK(exclude_list({a, b, c}) == "n2\nn9\n");
  // What the store says is not trusted: no escape, no second line, no flag.
  quarantine_record evil, blank;
  evil.host = "\x1b[31mEVIL\nline2 --evil";
  CHECK(exclude_list({a, evil, blank, b}) == "n2\nn9\n");
  CHECK(exclude_list({}).empty());
}
