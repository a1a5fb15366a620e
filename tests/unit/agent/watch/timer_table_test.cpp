#include <csignal>

#include <catch2/catch.hpp>

#include "agent/watch/timer_table.h"

using namespace dtrun::agent;

TEST_CASE("the earliest deadline is the smallest one held") {
  timer_table t(16);
  CHECK_FALSE(t.earliest());
  t.set(10, "a", 50.0, SIGKILL);
  t.set(11, "b", 20.0, SIGKILL);
  t.set(10, "c", 30.0, SIGKILL);
  CHECK(t.earliest() == 20.0);
  t.release(11, "b");
  CHECK(t.earliest() == 30.0);
  t.release(11, "b");  // twice: nothing
  t.release(99, "a");  // unknown: nothing
  CHECK(t.size() == 2);
}

TEST_CASE("setting a timer again moves its deadline") {
  timer_table t(16);
  t.set(10, "a", 20.0, SIGKILL);
  t.set(10, "a", 40.0, SIGTERM);
  CHECK(t.size() == 1);
  CHECK(t.earliest() == 40.0);
  CHECK(t.take_expired(30.0).empty());
  auto gone = t.take_expired(40.0);  // at the deadline exactly: expired
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].signal == SIGTERM);
}

TEST_CASE("an expired process loses all its timers and others keep theirs") {
  timer_table t(16);
  t.set(10, "a", 20.0, SIGKILL);
  t.set(10, "b", 90.0, SIGKILL);
  t.set(11, "a", 80.0, SIGKILL);
  auto gone = t.take_expired(25.0);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].pid == 10);
  CHECK(gone[0].scope_id == "a");
  CHECK(gone[0].expiration_time == 20.0);
  CHECK(t.size() == 1);
  CHECK(t.earliest() == 80.0);
  CHECK(t.take_expired(25.0).empty());
}

TEST_CASE("the first expired timer with a signal decides as in torch") {
  timer_table t(16);
  t.set(10, "quiet", 10.0, 0);
  t.set(10, "term", 20.0, SIGTERM);
  t.set(10, "kill", 30.0, SIGKILL);
  auto gone = t.take_expired(35.0);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].signal == SIGTERM);
  CHECK(gone[0].scope_id == "term");
  CHECK(t.size() == 0);
}

TEST_CASE("expired timers without a signal report signal zero") {
  timer_table t(16);
  t.set(10, "quiet", 10.0, 0);
  auto gone = t.take_expired(11.0);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].signal == 0);
  CHECK(t.size() == 0);
}

TEST_CASE("several processes expire in deadline order") {
  timer_table t(16);
  t.set(12, "a", 30.0, SIGKILL);
  t.set(11, "a", 10.0, SIGKILL);
  t.set(13, "a", 20.0, SIGKILL);
  auto gone = t.take_expired(100.0);
  REQUIRE(gone.size() == 3);
  CHECK(gone[0].pid == 11);
  CHECK(gone[1].pid == 13);
  CHECK(gone[2].pid == 12);
}

TEST_CASE("dropping a process removes only its timers") {
  timer_table t(16);
  t.set(10, "a", 20.0, SIGKILL);
  t.set(10, "b", 30.0, SIGKILL);
  t.set(9, "z", 40.0, SIGKILL);
  t.set(11, "a", 50.0, SIGKILL);
  t.drop(10);
  CHECK(t.size() == 2);
  CHECK(t.earliest() == 40.0);
  t.clear();
  CHECK(t.size() == 0);
  CHECK_FALSE(t.earliest());
}

TEST_CASE("new timers beyond the cap are refused and moves still work") {
  timer_table t(2);
  CHECK(t.set(10, "a", 20.0, SIGKILL));
  CHECK(t.set(10, "b", 30.0, SIGKILL));
  CHECK_FALSE(t.set(10, "c", 5.0, SIGKILL));
  CHECK(t.size() == 2);
  CHECK(t.earliest() == 20.0);
  CHECK(t.set(10, "a", 25.0, SIGKILL));  // an existing key may move
  t.release(10, "b");
  CHECK(t.set(10, "c", 5.0, SIGKILL));
  CHECK(t.earliest() == 5.0);
}

TEST_CASE("equal deadlines of different scopes are both kept") {
  timer_table t(16);
  t.set(10, "a", 20.0, SIGKILL);
  t.set(10, "b", 20.0, SIGKILL);
  t.release(10, "a");
  CHECK(t.size() == 1);
  CHECK(t.earliest() == 20.0);
}
