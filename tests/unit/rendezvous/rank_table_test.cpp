#include <catch2/catch.hpp>

#include "rendezvous/rank_table.h"

using namespace dtrun::rendezvous;

namespace {

node_descriptor node(std::string addr, long pid, int nproc, int prev_rank, int store_port) {
  return {.addr = std::move(addr), .hostname = "h", .pid = pid, .nproc = nproc,
          .prev_rank = prev_rank, .master_port = 0, .worker_store_port = store_port};
}

}  // namespace

TEST_CASE("a descriptor survives the trip through the store") {
  auto d = node("10.0.0.2", 42, 8, 1, 5000);
  auto back = descriptor_from_text(to_text(d));
  CHECK(back.addr == "10.0.0.2");
  CHECK(back.pid == 42);
  CHECK(back.nproc == 8);
  CHECK(back.prev_rank == 1);
  CHECK(back.worker_store_port == 5000);
  CHECK_THROWS(descriptor_from_text("{\"addr\":1}"));
  CHECK_THROWS(descriptor_from_text("not json"));
}

TEST_CASE("ranks: previous ranks are kept, newcomers fill the gaps by address") {
  // Arrival order: b (was 1), c (new), a (new), d (was 1 too: taken).
  std::vector<node_descriptor> nodes = {node("10.0.0.2", 1, 1, 1, 0), node("10.0.0.3", 1, 1, -1, 0),
                                        node("10.0.0.1", 1, 1, -1, 0), node("10.0.0.4", 1, 1, 1, 0)};
  CHECK(assign_ranks(nodes) == std::vector<int>{1, 2, 0, 3});
}

TEST_CASE("the c10d table points the workers at the host's store") {
  std::vector<node_descriptor> nodes = {node("10.0.0.2", 7, 2, -1, 0),
                                        node("10.0.0.1", 9, 4, -1, 6000)};
  auto text = make_rank_table(nodes, worker_store_choice::the_host);
  auto second = read_rank_table(text, 2);  // 10.0.0.1 sorts first: rank 0
  CHECK(second.group_rank == 0);
  CHECK(second.local_world_sizes == std::vector<int>{4, 2});
  CHECK(second.rank0_addr == "10.0.0.1");
  CHECK(second.worker_port == 6000);
  CHECK(second.worker_addr.empty());  // the endpoint host
  CHECK(read_rank_table(text, 1).group_rank == 1);
}

TEST_CASE("the etcd table points the workers at group rank 0's store") {
  std::vector<node_descriptor> nodes = {node("10.0.0.2", 7, 2, -1, 7002),
                                        node("10.0.0.1", 9, 2, -1, 7001)};
  auto a = read_rank_table(make_rank_table(nodes, worker_store_choice::group_rank_0), 1);
  CHECK(a.worker_port == 7001);
  CHECK(a.worker_addr == "10.0.0.1");
}

TEST_CASE("a corrupt or short table is an error, not a crash") {
  CHECK_THROWS(read_rank_table("{}", 1));
  CHECK_THROWS(read_rank_table(R"({"ranks":[0],"nproc":[1],"addrs":["a"],"ports":[0]})", 2));
  CHECK_THROWS(read_rank_table(
      R"({"ranks":[0],"nproc":[1],"addrs":["a"],"ports":[0],"worker_port":70000})", 1));
}
