// Helpers shared by the store benchmarks' load clients (store_load.cpp,
// store_barrier.cpp), so both speak a dialect and size themselves the same
// way.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rendezvous/store/wire_codec.h"

namespace dtrun::bench {

namespace wire = dtrun::rendezvous::wire;

// --dialect: v1.13 (torch 1.13's server) or v2 (torch 2.x's); dtrun-store
// speaks both, so a benchmark picks the one its anchor's clients speak.
inline void add_dialect_option(CLI::App& app, std::string& dialect) {
  app.add_option("--dialect", dialect, "wire dialect: v1.13 (torch 1.13's server) or v2 "
                 "(torch 2.x's; dtrun-store speaks both)")
      ->check(CLI::IsMember({"v1.13", "v2"}))
      ->capture_default_str();
}

inline wire::dialect dialect_of(const std::string& name) {
  return name == "v2" ? wire::dialect::v2 : wire::dialect::v1_13;
}

// The VALIDATE + magic a torch 2.x client opens every connection with (a
// 2.x server drops a connection without it); empty for 1.13, which has no
// handshake.
inline std::string validate_bytes(wire::dialect d) {
  if (d == wire::dialect::v1_13) return {};
  return wire::encode_request(d, wire::request{.kind = wire::op::validate,
                                               .nonce = wire::validation_magic});
}

// The shell's `ulimit -n $(ulimit -Hn)`: a load client holds thousands of
// sockets. Returns the soft limit in force afterwards.
inline rlim_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

// The p-th quantile (0..1) of an ascending `sorted`, nearest rank.
template <typename T>
T percentile(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return T{};
  auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace dtrun::bench
