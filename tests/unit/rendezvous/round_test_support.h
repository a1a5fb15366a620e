// What the rendezvous algorithm's tests over the in-memory store
// (memory_cluster.h) and over the real TCPStore (store_host_test.cpp)
// share: a node's options, the record of one round, and the checks of a
// three-node round, so both suites hold the algorithm to the same words.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/record/round_record.h"

namespace round_test_support {

// A round's end as the sentence it renders (describe()): what the tests
// compare. A watch_round callback may take it, converted from the record.
struct said : std::string {
  said(const dtrun::records::round_record& end)  // NOLINT: implicit on purpose
      : std::string(dtrun::records::describe(end)) {}
};

// A worker's failure with these words and no class (describe(): "node K:
// <detail>"), for report_failure().
inline dtrun::records::round_record worker_failure(std::string detail) {
  dtrun::records::round_record r;
  r.kind = dtrun::records::record_kind::worker_failed;
  r.detail = std::move(detail);
  return r;
}

// A node failing the job with these words (fail_job()).
inline dtrun::records::round_record job_failure(std::string detail) {
  auto r = worker_failure(std::move(detail));
  r.kind = dtrun::records::record_kind::job_failed;
  return r;
}

// The sentence a stored round end renders.
inline std::string said_in_store(const std::string& stored) {
  return dtrun::records::describe(dtrun::records::record_from_text(stored));
}

using dtrun::rendezvous::dynamic_rendezvous;
using dtrun::rendezvous::dynamic_rendezvous_options;
using dtrun::rendezvous::rendezvous_info;

// A node of job "job1" at 127.0.0.1:`port` (hosting it when `host`);
// `last_call` is the only timing the two suites set apart (no socket: the
// memory one need not wait). Log lines go to `log`.
inline dynamic_rendezvous_options node_options(std::uint16_t port, bool host, int min_nodes,
                                               int max_nodes, int nproc,
                                               std::chrono::milliseconds last_call,
                                               std::vector<std::string>& log) {
  using namespace std::chrono_literals;
  dynamic_rendezvous_options o;
  o.run_id = "job1";
  o.endpoint_host = "127.0.0.1";
  o.endpoint_port = port;
  o.host_store = host;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.local_world_size = nproc;
  o.join_timeout = 10s;
  o.last_call_timeout = last_call;
  o.close_timeout = 5s;
  o.keep_alive_interval = 100ms;
  o.max_restarts = 10;
  o.log = [&log](const std::string& line) { log.push_back(line); };
  return o;
}

struct round_result {
  std::exception_ptr error;
  rendezvous_info info;
  bool done = false;
};

// Starts a round on `node`, recording the outcome; `then` runs after.
inline void join(dynamic_rendezvous& node, round_result& out, std::function<void()> then = {}) {
  node.next_round([&out, then](std::exception_ptr e, rendezvous_info info) {
    out = {e, std::move(info), true};
    if (then) then();
  });
}

// One round on every node of `c` (a cluster with `nodes`, `io` and
// shutdown_all()); returns when all have completed.
template <typename Cluster>
std::vector<round_result> run_round(Cluster& c) {
  std::vector<round_result> results(c.nodes.size());
  std::size_t completed = 0;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++completed == c.nodes.size()) c.shutdown_all();
    });
  }
  c.io.run();
  return results;
}

inline std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

// Three nodes, node i running i+1 workers, met in round 0 of the store at
// `endpoint_port`: distinct group ranks, the workers' store the host's
// fresh one (the same for all), and global ranks 0..5 split in group rank
// order, each node's range after the lower ranks' ones.
inline void check_three_nodes_ranked(const std::vector<round_result>& results,
                                     std::uint16_t endpoint_port) {
  std::set<int> ranks;
  for (const auto& r : results) {
    REQUIRE(r.done);
    REQUIRE_FALSE(r.error);
    ranks.insert(r.info.group_rank);
    CHECK(r.info.round == 0);
    CHECK(r.info.group_world_size == 3);
    CHECK(r.info.master_addr == "127.0.0.1");
    // The workers' store is the host's fresh one for this round, not the
    // agents' endpoint store; every node is told the same one.
    CHECK(r.info.master_port != 0);
    CHECK(r.info.master_port != endpoint_port);
    CHECK(r.info.master_port == results[0].info.master_port);
    CHECK(r.info.store_port == endpoint_port);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
  std::vector<int> first_by_rank(3), nproc_by_rank(3);
  for (int i = 0; i < 3; ++i) {
    const auto& info = results[static_cast<std::size_t>(i)].info;
    CHECK(info.local_world_size == i + 1);
    CHECK(info.world_size == 6);
    first_by_rank.at(static_cast<std::size_t>(info.group_rank)) = info.first_rank;
    nproc_by_rank.at(static_cast<std::size_t>(info.group_rank)) = info.local_world_size;
  }
  CHECK(first_by_rank[0] == 0);
  CHECK(first_by_rank[1] == nproc_by_rank[0]);
  CHECK(first_by_rank[2] == nproc_by_rank[0] + nproc_by_rank[1]);
}

}  // namespace round_test_support
