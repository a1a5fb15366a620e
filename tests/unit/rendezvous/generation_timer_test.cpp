#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/base/generation_timer.h"

using namespace std::chrono_literals;
using dtrun::generation_timer;

TEST_CASE("generation_timer runs the callback of an arming once") {
  boost::asio::io_context io;
  generation_timer timer(io);
  int runs = 0;
  timer.arm_after(0ms, [&] { ++runs; });
  io.run();
  CHECK(runs == 1);
}

TEST_CASE("generation_timer: re-arming replaces the earlier arming") {
  boost::asio::io_context io;
  generation_timer timer(io);
  std::vector<int> ran;
  timer.arm_after(0ms, [&] { ran.push_back(1); });
  timer.arm_after(0ms, [&] { ran.push_back(2); });
  io.run();
  CHECK(ran == std::vector<int>{2});
}

TEST_CASE("generation_timer: an expiry already queued does not act after cancel()") {
  boost::asio::io_context io;
  generation_timer first(io), second(io);
  auto past = std::chrono::steady_clock::now() - 10s;
  bool second_ran = false;
  // Both have expired: one turn of the loop queues both completions with
  // success, and `first` (the earlier deadline) runs first.
  first.arm_at(past, [&] { second.cancel(); });
  second.arm_at(past + 1s, [&] { second_ran = true; });
  io.run();
  CHECK_FALSE(second_ran);
}

TEST_CASE("generation_timer: an expiry already queued does not act after the timer is gone") {
  boost::asio::io_context io;
  generation_timer first(io);
  auto second = std::make_unique<generation_timer>(io);
  auto past = std::chrono::steady_clock::now() - 10s;
  bool second_ran = false;
  first.arm_at(past, [&] { second.reset(); });
  second->arm_at(past + 1s, [&] { second_ran = true; });
  io.run();
  CHECK_FALSE(second_ran);
}

TEST_CASE("generation_timer: cancel() before expiry, then arming again, runs the new one") {
  boost::asio::io_context io;
  generation_timer timer(io);
  std::vector<int> ran;
  timer.arm_after(1h, [&] { ran.push_back(1); });
  timer.cancel();
  timer.arm_after(0ms, [&] { ran.push_back(2); });
  io.run();
  CHECK(ran == std::vector<int>{2});
}
