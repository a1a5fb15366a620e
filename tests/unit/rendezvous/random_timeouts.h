// Randomised timeouts for the tests that fire timeouts at random points:
// a seed that can be replayed, and durations drawn from it.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/store/store.h"
#include "round_test_support.h"

namespace dtrun::rendezvous::testing {

// DTRUN_TEST_SEED when set, so a failure printed with its seed can be
// replayed; otherwise a fresh random seed.
inline unsigned test_seed() {
  if (const char* s = std::getenv("DTRUN_TEST_SEED")) return static_cast<unsigned>(std::stoul(s));
  return std::random_device{}();
}

// A duration from 0 to `ms` milliseconds, both included.
inline std::chrono::milliseconds up_to(std::mt19937& rng, int ms) {
  return std::chrono::milliseconds(std::uniform_int_distribution<int>(0, ms)(rng));
}

// One trial of "rounds with zero and random tiny timeouts complete exactly
// once", on a fresh `Cluster` (memory_cluster.h's or store_host_test's):
// one or two nodes (by the trial's parity), every timeout drawn from 0..2
// ms (exactly 0 in the first 50 trials); each node's round must complete
// exactly once, with rank info or a store_error and nothing else. Returns
// how many rounds succeeded.
template <typename Cluster>
int random_timeouts_trial(std::mt19937& rng, int trial) {
  Cluster c;
  int max_ms = trial < 50 ? 0 : 2;
  auto tweak = [&](dynamic_rendezvous_options& o) {
    o.join_timeout = up_to(rng, max_ms);
    o.last_call_timeout = up_to(rng, max_ms);
    o.close_timeout = up_to(rng, max_ms);
    o.keep_alive_interval = up_to(rng, max_ms);
    o.no_host_warning = up_to(rng, max_ms);
  };
  int nodes = 1 + trial % 2;
  for (int i = 0; i < nodes; ++i) c.add_with(1, 2, tweak);
  std::vector<int> calls(static_cast<std::size_t>(nodes), 0);
  int completed = 0, succeeded = 0;
  for (int i = 0; i < nodes; ++i) {
    c.nodes[static_cast<std::size_t>(i)]->next_round([&, i](std::exception_ptr e,
                                                            rendezvous_info) {
      ++calls[static_cast<std::size_t>(i)];
      if (e) {
        INFO("node " << i << ": " << round_test_support::message_of(e));
        try {
          std::rethrow_exception(e);
        } catch (const store_error&) {
        } catch (...) {
          FAIL("not a store_error");
        }
      } else {
        ++succeeded;
      }
      if (++completed == nodes) c.shutdown_all();
    });
  }
  c.io.run();
  for (int n : calls) CHECK(n == 1);
  return succeeded;
}

}  // namespace dtrun::rendezvous::testing
