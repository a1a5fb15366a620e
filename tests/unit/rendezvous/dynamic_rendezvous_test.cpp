// The rendezvous algorithm (dynamic_rendezvous, the production class) with
// every node of a cluster in one process, on one event loop, meeting in an
// in-memory store (memory_round_store.h): no socket, no OS call, so these
// run in milliseconds and inside `unshare -n`. The node hosting the store
// and each round's workers' store is a fake store_host, and the OS
// (host name, pid, reserved ports) a fake rendezvous_os. The same
// scenarios over the real TCPStore and hosting: store_host_test.cpp and
// tests/integration, tests/e2e.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "random_timeouts.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/algorithm/rendezvous_os.h"
#include "rendezvous/algorithm/store_host.h"
#include "rendezvous/store/memory_round_store.h"
#include "rendezvous/store/store.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

// Everything in a namespace of its own, test cases included: a unity batch
// compiles the test files of the folder together.
namespace memory_cluster {


class fake_os final : public rendezvous_os {
 public:
  explicit fake_os(int node) : node_(node) {}
  bool is_this_machine(const std::string& host) const override { return host == "localhost"; }
  int reserve_port(const std::string&) const override { return 50000 + node_; }
  std::string host_name() const override { return fmt::format("host{}", node_); }
  long pid() const override { return 1000 + node_; }

 private:
  int node_;
};

// Hosts nothing real: ports are numbers from a counter the cluster shares.
class fake_store_host final : public store_host {
 public:
  fake_store_host(std::uint16_t endpoint, int& next_port) : endpoint_(endpoint), next_(next_port) {}
  std::uint16_t endpoint_port() const override { return endpoint_; }
  std::uint16_t open_worker_store() override {
    worker_ = static_cast<std::uint16_t>(next_++);
    return worker_;
  }
  std::uint16_t worker_store_port() const override { return worker_; }
  void close_worker_store() override { worker_ = 0; }
  store_server_stats stats() const override { return {}; }
  void stop() override { worker_ = 0; }

 private:
  std::uint16_t endpoint_;
  std::uint16_t worker_ = 0;
  int& next_;
};

// A node whose process hangs (SIGSTOP) with its connection open: from
// hang() on, its requests are never answered, and no will runs.
class hanging_store final : public round_store {
 public:
  hanging_store(std::shared_ptr<round_store> inner, const bool& hung)
      : inner_(std::move(inner)), hung_(hung) {}
  void connect(store_callback done) override { inner_->connect(gate(done)); }
  void set(std::string k, std::string v, store_callback done) override {
    if (!hung_) inner_->set(std::move(k), std::move(v), std::move(done));
  }
  void multi_set(std::vector<std::string> k, std::vector<std::string> v,
                 store_callback done) override {
    if (!hung_) inner_->multi_set(std::move(k), std::move(v), std::move(done));
  }
  void get(std::string k, store_duration t, store_callback done) override {
    if (!hung_) inner_->get(std::move(k), t, gate(done));
  }
  void add(std::string k, std::int64_t d, store_callback done) override {
    if (!hung_) inner_->add(std::move(k), d, gate(done));
  }
  void compare_set(std::string k, std::string e, std::string d, store_callback done) override {
    if (!hung_) inner_->compare_set(std::move(k), std::move(e), std::move(d), gate(done));
  }
  void check(std::vector<std::string> k, store_callback done) override {
    if (!hung_) inner_->check(std::move(k), gate(done));
  }
  void wait(std::vector<std::string> k, store_duration t, store_callback done) override {
    if (!hung_) inner_->wait(std::move(k), t, gate(done));
  }
  void delete_key(std::string k, store_callback done) override {
    if (!hung_) inner_->delete_key(std::move(k), gate(done));
  }
  void multi_get(std::vector<std::string> k, store_duration t, store_callback done) override {
    if (!hung_) inner_->multi_get(std::move(k), t, gate(done));
  }
  void read_now(std::vector<std::string> k, store_callback done) override {
    if (!hung_) inner_->read_now(std::move(k), gate(done));
  }
  void set_will(std::string w, std::string t, std::string v, store_callback done) override {
    if (!hung_) inner_->set_will(std::move(w), std::move(t), std::move(v), gate(done));
  }
  void withdraw_will(std::string w, store_callback done) override {
    if (!hung_) inner_->withdraw_will(std::move(w), gate(done));
  }
  // A hung process closes nothing: its will must not run.
  void close() override {
    if (!hung_) inner_->close();
  }
  std::string local_address() const override { return inner_->local_address(); }

 private:
  // Replies that arrive once the node hangs are never seen.
  store_callback gate(store_callback done) const {
    return [&hung = hung_, done = std::move(done)](store_result r) {
      if (!hung) done(std::move(r));
    };
  }
  std::shared_ptr<round_store> inner_;
  const bool& hung_;
};

struct cluster {
  boost::asio::io_context io;
  memory_round_server store{io};
  std::vector<std::unique_ptr<dynamic_rendezvous>> nodes;
  std::vector<std::string> log;
  std::uint16_t port = 29400;  // the endpoint store's, hosted by node 0
  int next_port = 41000;       // the workers' stores'
  std::vector<std::unique_ptr<bool>> hung;  // per node: hang(i)

  dynamic_rendezvous_options options(int min_nodes, int max_nodes, int nproc) {
    dynamic_rendezvous_options o;
    o.run_id = "job1";
    o.endpoint_host = "127.0.0.1";
    o.endpoint_port = port;
    o.host_store = nodes.empty();
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.local_world_size = nproc;
    o.join_timeout = 10s;
    o.last_call_timeout = 200ms;
    o.close_timeout = 5s;
    o.keep_alive_interval = 100ms;
    o.max_restarts = 10;
    o.log = [this](const std::string& line) { log.push_back(line); };
    return o;
  }

  // Node i with fakes for the OS and hosting and clients of `store`.
  dynamic_rendezvous& add_node(dynamic_rendezvous_options o) {
    int index = static_cast<int>(nodes.size());
    hung.push_back(std::make_unique<bool>(false));
    rendezvous_parts parts;
    parts.os = std::make_shared<fake_os>(index);
    parts.host = std::make_unique<fake_store_host>(o.host_store ? port : 0, next_port);
    parts.connect = [this, &h = *hung.back()](std::chrono::milliseconds) {
      return round_store_clients{std::make_shared<hanging_store>(store.client(), h),
                                 std::make_shared<hanging_store>(store.client(), h)};
    };
    nodes.push_back(std::make_unique<dynamic_rendezvous>(io, std::move(o), std::move(parts)));
    return *nodes.back();
  }

  dynamic_rendezvous& add(int min_nodes, int max_nodes, int nproc = 1) {
    return add_node(options(min_nodes, max_nodes, nproc));
  }

  // Adds a node with options(min, max, 1) adjusted by `tweak`.
  dynamic_rendezvous& add_with(int min_nodes, int max_nodes,
                               const std::function<void(dynamic_rendezvous_options&)>& tweak) {
    auto o = options(min_nodes, max_nodes, 1);
    tweak(o);
    return add_node(std::move(o));
  }

  // Node i hangs: alive to its connection, silent to the store.
  void hang(std::size_t i) { *hung.at(i) = true; }

  void shutdown_all() {
    for (auto& n : nodes) n->shutdown();
  }

  std::size_t log_count(const std::string& text) const {
    return static_cast<std::size_t>(std::count_if(log.begin(), log.end(), [&](const auto& l) {
      return l.find(text) != std::string::npos;
    }));
  }
};

struct round_result {
  std::exception_ptr error;
  rendezvous_info info;
  bool done = false;
};

// Starts a round on `node`, recording the outcome; `then` runs after.
void join(dynamic_rendezvous& node, round_result& out, std::function<void()> then = {}) {
  node.next_round([&out, then](std::exception_ptr e, rendezvous_info info) {
    out = {e, std::move(info), true};
    if (then) then();
  });
}

// One round on every node of `c`; returns when all have completed.
std::vector<round_result> run_round(cluster& c) {
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

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}


TEST_CASE("three nodes get distinct ranks and every node's worker count", "[dynamic_rendezvous]") {
  cluster c;
  std::vector<round_result> results(3);
  int completed = 0;
  auto after = [&] {
    if (++completed == 3) c.shutdown_all();
  };
  for (int i = 0; i < 3; ++i) c.add(3, 3, i + 1);
  for (int i = 0; i < 3; ++i) join(*c.nodes[i], results[i], after);
  c.io.run();

  std::set<int> ranks;
  for (auto& r : results) {
    REQUIRE(r.done);
    REQUIRE_FALSE(r.error);
    ranks.insert(r.info.group_rank);
    CHECK(r.info.round == 0);
    CHECK(r.info.group_world_size == 3);
    CHECK(r.info.master_addr == "127.0.0.1");
    // The workers' store is the host's fresh one for this round, not the
    // agents' endpoint store; every node is told the same one.
    CHECK(r.info.master_port != 0);
    CHECK(r.info.master_port != c.port);
    CHECK(r.info.master_port == results[0].info.master_port);
    CHECK(r.info.store_port == c.port);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
  // Node i runs i+1 workers: the global ranks 0..5 are split in group
  // rank order, each node's range after the lower ranks' ones.
  std::vector<int> first_by_rank(3), nproc_by_rank(3);
  for (int i = 0; i < 3; ++i) {
    auto& info = results[i].info;
    CHECK(info.local_world_size == i + 1);
    CHECK(info.world_size == 6);
    first_by_rank.at(info.group_rank) = info.first_rank;
    nproc_by_rank.at(info.group_rank) = info.local_world_size;
  }
  CHECK(first_by_rank[0] == 0);
  CHECK(first_by_rank[1] == nproc_by_rank[0]);
  CHECK(first_by_rank[2] == nproc_by_rank[0] + nproc_by_rank[1]);
}

TEST_CASE("with MIN:MAX the round closes after the last call with the nodes present",
          "[dynamic_rendezvous]") {
  cluster c;
  std::vector<round_result> results(2);
  int completed = 0;
  c.add(2, 4);
  c.add(2, 4);
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++completed == 2) c.shutdown_all();
    });
  }
  c.io.run();
  for (auto& r : results) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.group_world_size == 2);
  }
}

TEST_CASE("a failure on one node ends the round everywhere, and ranks survive the restart",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> first(3), second(3);
  std::vector<std::string> reasons(3);
  int restarts = 0;
  int first_done = 0, second_done = 0;

  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&] {
      if (++second_done == 3) c.shutdown_all();
    });
  };
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](std::string reason) {
        reasons[i] = reason;
        start_second(i);
      });
      if (++first_done < 3) return;
      // Every node runs round 0; now node 1's workers fail.
      c.nodes[1]->report_failure("worker 3 exited with 1", [&](std::exception_ptr e, int n) {
        REQUIRE_FALSE(e);
        restarts = n;
        start_second(1);
      });
    });
  }
  c.io.run();
  CHECK(restarts == 1);
  CHECK_THAT(reasons[0], Catch::Contains("worker 3 exited with 1"));
  CHECK_THAT(reasons[2], Catch::Contains("worker 3 exited with 1"));
  CHECK(reasons[1].empty());  // the failing node is not told about itself
  for (int i = 0; i < 3; ++i) {
    REQUIRE_FALSE(second[i].error);
    CHECK(second[i].info.round == 1);
    CHECK(second[i].info.group_rank == first[i].info.group_rank);
    // A new round, a new (empty) store for the workers.
    CHECK(second[i].info.master_port != first[i].info.master_port);
    CHECK(second[i].info.master_port == second[0].info.master_port);
    CHECK(second[i].info.master_port != c.port);
  }
}

TEST_CASE("nodes whose workers fail together in one round count one restart",
          "[dynamic_rendezvous]") {
  // Both nodes report before either hears that the round ended (the
  // workers of one collective fail together): the job has used one restart
  // after round 0 and two after round 1, on both nodes.
  cluster c;
  for (int i = 0; i < 2; ++i) c.add(2, 2);
  std::vector<std::vector<int>> counts(2);
  int joined = 0;
  std::function<void(int)> start_round = [&](int round) {
    auto results = std::make_shared<std::vector<round_result>>(2);
    for (int i = 0; i < 2; ++i) {
      join(*c.nodes[i], (*results)[i], [&, results, round] {
        if (++joined < 2 * (round + 1)) return;
        for (const auto& r : *results) REQUIRE_FALSE(r.error);
        auto reported = std::make_shared<int>(0);
        for (int n = 0; n < 2; ++n) {
          c.nodes[n]->report_failure("worker exited with 3",
                                     [&, n, round, reported](std::exception_ptr e, int k) {
                                       REQUIRE_FALSE(e);
                                       counts[n].push_back(k);
                                       if (++*reported < 2) return;
                                       if (round == 0) {
                                         start_round(1);
                                       } else {
                                         c.shutdown_all();
                                       }
                                     });
        }
      });
    }
  };
  start_round(0);
  c.io.run();
  CHECK(counts[0] == std::vector<int>{1, 2});
  CHECK(counts[1] == std::vector<int>{1, 2});
}

TEST_CASE("a node whose connection dies ends the round at once (last will)",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(2, 3);
  std::vector<round_result> first(3), second(2);
  std::string reason;
  int first_done = 0, second_done = 0;
  c.log.clear();
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](std::string why) {
          reason = why;
          join(*c.nodes[i], second[i], [&] {
            if (++second_done == 2) c.shutdown_all();
          });
        });
      }
      // Node 2 "dies": its connections close without a goodbye.
      if (++first_done == 3) c.nodes[2]->shutdown();
    });
  }
  c.io.run();
  CHECK_THAT(reason, Catch::Contains("was lost"));
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.group_world_size == 2);
    CHECK(r.info.round == 1);
  }
}

TEST_CASE("a node arriving at a running round below MAX is let in", "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 3);
  c.add(2, 3);
  std::vector<round_result> first(2), second(3);
  std::vector<std::string> reasons(2);
  int first_done = 0, second_done = 0;
  auto all_second = [&] {
    if (++second_done == 3) c.shutdown_all();
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](std::string why) {
        reasons[i] = why;
        join(*c.nodes[i], second[i], all_second);
      });
      if (++first_done == 2) {
        // Round 0 runs with two nodes; a third arrives.
        join(c.add(2, 3), second[2], all_second);
      }
    });
  }
  c.io.run();
  CHECK_THAT(reasons[0], Catch::Contains("waiting to join"));
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 3);
  }
  // The first two kept their ranks; the newcomer took the free one.
  CHECK(second[0].info.group_rank == first[0].info.group_rank);
  CHECK(second[1].info.group_rank == first[1].info.group_rank);
  CHECK(second[2].info.group_rank == 2);
}

// A newcomer joins a round without asking first whether it has closed; at
// a full round it must learn from its arrival index that it came late and
// wait, not end the round or take a rank in it.
TEST_CASE("a node arriving at a full round waits for the next one", "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 2);
  c.add(2, 2);
  std::vector<round_result> first(2);
  round_result newcomer, node0_again;
  std::vector<std::string> reasons(2);
  int first_done = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](std::string why) {
        reasons[i] = why;
        if (i == 0) join(*c.nodes[0], node0_again, [&] {
          if (newcomer.done) c.shutdown_all();
        });
      });
      if (++first_done < 2) return;
      // Round 0 runs with its two nodes, the most it takes; a third arrives.
      auto& third = c.add_with(2, 2, [&](dynamic_rendezvous_options& o) {
        o.log = [&](const std::string& line) {
          c.log.push_back(line);
          // It waits; only then does node 1 die, and its last will end
          // round 0, so node 0 and the newcomer meet in round 1.
          if (line.find("is full") != std::string::npos) {
            boost::asio::post(c.io, [&] { c.nodes[1]->shutdown(); });
          }
        };
      });
      join(third, newcomer, [&] {
        if (node0_again.done) c.shutdown_all();
      });
    });
  }
  c.io.run();
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("round 0 is full (2 nodes); waiting for the next one") != std::string::npos;
        }) == 1);
  // Round 0 ended because node 1 died, not because of the newcomer.
  CHECK_THAT(reasons[0], !Catch::Contains("waiting to join"));
  REQUIRE_FALSE(newcomer.error);
  REQUIRE_FALSE(node0_again.error);
  CHECK(newcomer.info.round == 1);
  CHECK(node0_again.info.round == 1);
  CHECK(newcomer.info.group_world_size == 2);
  CHECK(node0_again.info.group_rank == first[0].info.group_rank);
  CHECK(newcomer.info.group_rank == 1 - first[0].info.group_rank);
}

TEST_CASE("the exit barrier releases every node when the last one finishes",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> results(3);
  int joined = 0, finished = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 3) return;
      for (auto& n : c.nodes) {
        n->finish([&](std::exception_ptr e) {
          CHECK_FALSE(e);
          if (++finished == 3) c.shutdown_all();
        });
      }
    });
  }
  c.io.run();
  CHECK(finished == 3);
}

TEST_CASE("a node lost during the exit barrier ends it with the loss, not a release",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> results(3);
  std::vector<std::string> errors;
  int joined = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 3) return;
      // Nodes 0 and 1 finish; node 2 dies before it does.
      for (int n = 0; n < 2; ++n) {
        c.nodes[n]->finish([&](std::exception_ptr e) {
          errors.push_back(e ? message_of(e) : "released");
          if (errors.size() == 2) c.shutdown_all();
        });
      }
      boost::asio::post(c.io, [&] { c.nodes[2]->shutdown(); });
    });
  }
  c.io.run();
  REQUIRE(errors.size() == 2);
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("ended before every node finished") &&
                      Catch::Contains("was lost"));
  }
}

TEST_CASE("the exit barrier lets a node go alone after exit_barrier_timeout",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) { o.exit_barrier_timeout = 200ms; });
  c.add(2, 2);
  std::vector<round_result> results(2);
  std::optional<std::string> outcome;
  int joined = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 2) return;
      // Node 1 is still training.
      c.nodes[0]->finish([&](std::exception_ptr e) {
        outcome = e ? message_of(e) : "";
        c.shutdown_all();
      });
    });
  }
  c.io.run();
  REQUIRE(outcome);
  CHECK(outcome->empty());
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("exit barrier: not every node finished within") != std::string::npos;
        }) == 1);
}

// A failure elsewhere ends node 0's exit barrier and both nodes rejoin.
// The barrier's timeout belongs to that barrier: armed in round 0, it must
// not fire in round 1, where it stopped node 0's heartbeats (its ring
// predecessor then declared it lost) and could have let it leave alone.
TEST_CASE("an exit barrier that a failure ended does not time out in the next round",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) {
    o.exit_barrier_timeout = 300ms;
    o.keep_alive_interval = 50ms;
  });
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) {
    o.exit_barrier_timeout = 3s;  // bounds the test if round 1 goes wrong
    o.keep_alive_interval = 50ms;
  });
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> round1_over, released;
  std::optional<std::string> barrier0;
  int first_done = 0, second_done = 0;
  boost::asio::steady_timer later(c.io);
  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      REQUIRE_FALSE(second[i].error);
      c.nodes[i]->watch_round([&](std::string why) { round1_over.push_back(why); });
      if (++second_done < 2) return;
      // Round 1 runs well past node 0's round-0 barrier timeout, then both
      // nodes finish.
      later.expires_after(1s);
      later.async_wait([&](const boost::system::error_code&) {
        for (int n = 0; n < 2; ++n) {
          c.nodes[n]->finish([&](std::exception_ptr e) {
            released.push_back(e ? message_of(e) : "");
            if (released.size() == 2) c.shutdown_all();
          });
        }
      });
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      REQUIRE_FALSE(first[i].error);
      if (i == 0) c.nodes[0]->watch_round([&](std::string) { start_second(0); });
      if (++first_done < 2) return;
      // Node 0's workers succeed; node 1's fail.
      c.nodes[0]->finish([&](std::exception_ptr e) { barrier0 = e ? message_of(e) : ""; });
      c.nodes[1]->report_failure("worker exited with 1", [&](std::exception_ptr e, int) {
        REQUIRE_FALSE(e);
        start_second(1);
      });
    });
  }
  c.io.run();
  REQUIRE(barrier0);
  CHECK_THAT(*barrier0, Catch::Contains("ended before every node finished"));
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("exit barrier: not every node finished") != std::string::npos;
        }) == 0);
  CHECK(round1_over.empty());
  CHECK(released == std::vector<std::string>{"", ""});
}

TEST_CASE("a node waiting for the next round of a job that finishes is told so",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 2);
  c.add(2, 2);
  std::vector<round_result> first(2);
  round_result newcomer;
  int joined = 0, released = 0;
  auto end_when_all_told = [&] {
    if (released == 2 && newcomer.done) c.shutdown_all();
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&] {
      if (++joined < 2) return;
      // The job runs with its two nodes, the most it takes; a third
      // arrives and waits; then both finish.
      auto& third = c.add_with(2, 2, [&](dynamic_rendezvous_options& o) {
        o.log = [&](const std::string& line) {
          if (line.find("is full") == std::string::npos) return;
          for (int n = 0; n < 2; ++n) {
            c.nodes[n]->finish([&](std::exception_ptr e) {
              CHECK_FALSE(e);
              ++released;
              end_when_all_told();
            });
          }
        };
      });
      join(third, newcomer, end_when_all_told);
    });
  }
  c.io.run();
  CHECK(released == 2);
  REQUIRE(newcomer.error);
  CHECK_THAT(message_of(newcomer.error), Catch::Contains("the job finished (round 0) before this "
                                                         "node could join"));
}

// Below MAX a latecomer asks to be let in by ending the round; once every
// node finished, that must neither overwrite the release in `over` nor
// leave the latecomer waiting join_timeout for a round nobody will join.
TEST_CASE("a node arriving below MAX after every node finished is told the job finished",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 3);
  c.add(2, 3);
  std::vector<round_result> first(2);
  round_result newcomer;
  int joined = 0, released = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&] {
      if (++joined < 2) return;
      for (int n = 0; n < 2; ++n) {
        c.nodes[n]->finish([&](std::exception_ptr e) {
          CHECK_FALSE(e);
          if (++released < 2) return;
          // The job is over (the host's store is still up); a third node
          // arrives, with room for it below MAX.
          auto& third = c.add_with(2, 3, [](dynamic_rendezvous_options& o) {
            o.join_timeout = 3s;  // bounds the test when it waits wrongly
          });
          join(third, newcomer, [&] { c.shutdown_all(); });
        });
      }
    });
  }
  c.io.run();
  CHECK(released == 2);
  REQUIRE(newcomer.done);
  REQUIRE(newcomer.error);
  CHECK_THAT(message_of(newcomer.error),
             Catch::Contains("the job finished (round 0) before this node could join"));
  // The release stays in `over`: the latecomer's request did not cover it.
  CHECK(c.store.value(rendezvous_keys("job1").over(0)).value_or("(absent)") ==
        "every node finished");
}

TEST_CASE("static rendezvous pins each node's rank and rejects a duplicate",
          "[dynamic_rendezvous]") {
  cluster c;
  std::vector<round_result> results;
  auto run_with_node_ranks = [&](std::vector<int> node_ranks) {
    for (int rank : node_ranks) {
      c.add_with(3, 3, [rank](auto& o) {
        o.fixed_rank = rank;
        o.fresh_worker_store = false;  // as the static backend sets it
      });
    }
    results = run_round(c);
  };
  SECTION("distinct node ranks are kept whatever the arrival order") {
    run_with_node_ranks({2, 0, 1});
    CHECK(results[0].info.group_rank == 2);
    CHECK(results[1].info.group_rank == 0);
    CHECK(results[2].info.group_rank == 1);
    // Static: MASTER_PORT stays --master-port (the endpoint), as torchrun's.
    for (auto& r : results) CHECK(r.info.master_port == c.port);
  }
  SECTION("two nodes with the same --node-rank fail with a clear message") {
    run_with_node_ranks({0, 1, 1});
    int failed = 0;
    for (auto& r : results) {
      if (!r.error) continue;
      ++failed;
      CHECK_THAT(message_of(r.error), Catch::Contains("--node-rank=1"));
    }
    CHECK(failed == 1);
  }
}

TEST_CASE("failure reports reach every node, and the store's host waits until all read them",
          "[dynamic_rendezvous]") {
  // The failing node is the host (node 0): it must not finish reading (and
  // so leave, taking the store along) before node 1 has read the reports.
  cluster c;
  for (int i = 0; i < 2; ++i) c.add_with(2, 2, [](auto& o) { o.max_restarts = 0; });
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> order;
  std::vector<std::vector<std::string>> read(2);
  std::vector<std::size_t> totals(2);
  std::int64_t failed_round = -1;
  int first_done = 0;
  auto read_failures = [&](int i, std::int64_t round) {
    c.nodes[i]->round_failures(round, [&, i](std::vector<std::string> records, std::size_t total) {
      read[i] = std::move(records);
      totals[i] = total;
      order.push_back("node " + std::to_string(i) + " read");
      if (order.size() == 2) c.shutdown_all();
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i == 1) {
        c.nodes[1]->watch_round([&](std::string) {
          join(*c.nodes[1], second[1], [&] {
            try {
              std::rethrow_exception(second[1].error);
            } catch (const job_failed_error& e) {
              failed_round = e.round;
            } catch (...) {
            }
            read_failures(1, failed_round);
          });
        });
      }
      if (++first_done < 2) return;
      c.nodes[0]->publish_failure(0, R"({"rank": 1, "message": "boom 42"})", [&] {
        c.nodes[0]->publish_failure(0, R"({"rank": 0, "message": "later"})", [&] {
          c.nodes[0]->report_failure("worker rank 1 exited with code 1",
                                     [&](std::exception_ptr, int) {
                                       c.nodes[0]->fail_job("out of restarts",
                                                            [&] { read_failures(0, 0); });
                                     });
        });
      });
    });
  }
  c.io.run();
  CHECK(failed_round == 0);
  CHECK(order == std::vector<std::string>{"node 1 read", "node 0 read"});
  for (int i = 0; i < 2; ++i) {
    CHECK(totals[i] == 2);
    REQUIRE(read[i].size() == 2);
    CHECK(read[i][0] == R"({"rank": 1, "message": "boom 42"})");
  }
}

TEST_CASE("a round started again at once ignores the abandoned round's replies",
          "[dynamic_rendezvous]") {
  // The second next_round() closes the first's connections, whose
  // callbacks then fail: they must not fail the new round, and the first
  // call still completes, once, with an error.
  cluster c;
  auto& a = c.add(2, 2);
  auto& b = c.add(2, 2);
  int first_calls = 0;
  std::string first_error;
  a.next_round([&](std::exception_ptr e, rendezvous_info) {
    ++first_calls;
    if (e) first_error = message_of(e);
  });
  round_result again, other;
  std::size_t completed = 0;
  auto both = [&] {
    if (++completed == 2) c.shutdown_all();
  };
  join(a, again, both);
  join(b, other, both);
  c.io.run();
  CHECK(first_calls == 1);
  CHECK_THAT(first_error, Catch::Contains("abandoned"));
  REQUIRE(again.done);
  REQUIRE(other.done);
  CHECK_FALSE(again.error);
  CHECK_FALSE(other.error);
  CHECK(again.info.group_rank != other.info.group_rank);
}

// A node that hangs with its connection open (no will runs) is named by its
// ring predecessor, which ends the round; the others go on without it.
TEST_CASE("a node that stops sending heartbeats is declared lost by its ring predecessor",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) {
    c.add_with(2, 3, [](dynamic_rendezvous_options& o) {
      o.keep_alive_interval = 10ms;
      o.keep_alive_max_attempt = 3;
    });
  }
  std::vector<round_result> first(3), second(2);
  std::vector<std::string> reasons(2);
  int first_done = 0, second_done = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](std::string why) {
          reasons[i] = why;
          join(*c.nodes[i], second[i], [&] {
            if (++second_done == 2) c.shutdown_all();
          });
        });
      }
      if (++first_done == 3) c.hang(2);
    });
  }
  c.io.run();
  REQUIRE(first[2].done);
  auto lost = fmt::format("node {} stopped sending heartbeats", first[2].info.group_rank);
  CHECK(reasons[0] == lost);
  CHECK(reasons[1] == lost);
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 2);
  }
}

// A node may start its next round at once (its workers failed and it does
// not wait to hear it from the store): the previous round's WAIT on `over`
// then fails when the new round closes its client. That stale reply must
// not end the new round (before 2026-11-22 it set the round-over flag of
// the new round: no `over` was ever reported again, and the exit barrier
// waited out its timeout).
TEST_CASE("a reply of the previous round neither ends nor blocks the next round",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 2; ++i) {
    c.add_with(2, 2, [](dynamic_rendezvous_options& o) { o.exit_barrier_timeout = 3s; });
  }
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> told_round1, released;
  int first_done = 0, second_done = 0;
  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      REQUIRE_FALSE(second[i].error);
      c.nodes[i]->watch_round([&](std::string why) { told_round1.push_back(why); });
      if (++second_done < 2) return;
      for (int n = 0; n < 2; ++n) {
        c.nodes[n]->finish([&](std::exception_ptr e) {
          released.push_back(e ? message_of(e) : "");
          if (released.size() == 2) c.shutdown_all();
        });
      }
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      REQUIRE_FALSE(first[i].error);
      if (i == 1) c.nodes[1]->watch_round([&](std::string) { start_second(1); });
      if (++first_done < 2) return;
      // Node 0 rejoins at once; its will tells node 1 that round 0 is over.
      start_second(0);
    });
  }
  c.io.run();
  CHECK(told_round1.empty());
  CHECK(released == std::vector<std::string>{"", ""});
  CHECK(c.log_count("exit barrier: not every node finished") == 0);
  for (auto& r : second) CHECK(r.info.round == 1);
}

TEST_CASE("in memory, rounds with zero and random tiny timeouts complete exactly once",
          "[dynamic_rendezvous]") {
  auto seed = testing::test_seed();
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 150; ++trial) {
    cluster c;
    int max_ms = trial < 50 ? 0 : 2;  // the first third at exactly 0
    auto tweak = [&](dynamic_rendezvous_options& o) {
      o.join_timeout = testing::up_to(rng, max_ms);
      o.last_call_timeout = testing::up_to(rng, max_ms);
      o.close_timeout = testing::up_to(rng, max_ms);
      o.keep_alive_interval = testing::up_to(rng, max_ms);
      o.no_host_warning = testing::up_to(rng, max_ms);
    };
    int nodes = 1 + trial % 2;
    for (int i = 0; i < nodes; ++i) c.add_with(1, 2, tweak);
    std::vector<int> calls(nodes, 0);
    int completed = 0;
    for (int i = 0; i < nodes; ++i) {
      c.nodes[i]->next_round([&, i](std::exception_ptr e, rendezvous_info) {
        ++calls[i];
        if (e) {
          INFO("node " << i << ": " << message_of(e));
          try {
            std::rethrow_exception(e);
          } catch (const store_error&) {
          } catch (...) {
            FAIL("not a store_error");
          }
        }
        if (++completed == nodes) c.shutdown_all();
      });
    }
    c.io.run();
    for (int i = 0; i < nodes; ++i) CHECK(calls[i] == 1);
  }
}

}  // namespace memory_cluster
