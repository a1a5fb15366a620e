// Randomised timeouts for the tests that fire timeouts at random points:
// a seed that can be replayed, and durations drawn from it.
#pragma once

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>

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

}  // namespace dtrun::rendezvous::testing
