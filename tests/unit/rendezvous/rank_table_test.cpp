#include <catch2/catch.hpp>

#include "rendezvous/algorithm/rank_table.h"

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

TEST_CASE("each node's assignment: its rank, its first global rank, the world") {
  // Arrival order: 10.0.0.2 (2 workers), 10.0.0.1 (4), 10.0.0.3 (3).
  std::vector<node_descriptor> nodes = {node("10.0.0.2", 7, 2, -1, 0),
                                        node("10.0.0.1", 9, 4, -1, 6000),
                                        node("10.0.0.3", 5, 3, -1, 0)};
  auto all = make_assignments(nodes, worker_store_choice::the_host);
  REQUIRE(all.size() == 3);
  // 10.0.0.1 sorts first: rank 0 with global ranks 0-3; then .2 (4-5), .3 (6-8).
  CHECK(all[1].group_rank == 0);
  CHECK(all[1].first_rank == 0);
  CHECK(all[0].group_rank == 1);
  CHECK(all[0].first_rank == 4);
  CHECK(all[0].nproc == 2);
  CHECK(all[2].group_rank == 2);
  CHECK(all[2].first_rank == 6);
  for (const auto& a : all) {
    CHECK(a.world_size == 9);
    CHECK(a.rank0_addr == "10.0.0.1");
    CHECK(a.worker_port == 6000);  // the one node that opened a store
    CHECK(a.worker_addr.empty());  // reached at the endpoint host
  }
  // The ring successor (group rank + 1, wrapping) by arrival index:
  // rank 0 (arrived 2nd) reads rank 1's (1st), rank 1 rank 2's (3rd),
  // rank 2 rank 0's.
  CHECK(all[1].successor_arrival == 1);
  CHECK(all[0].successor_arrival == 3);
  CHECK(all[2].successor_arrival == 2);
  auto back = assignment_from_text(to_text(all[2]));
  CHECK(back.successor_arrival == 2);
  CHECK(back.group_rank == 2);
  CHECK(back.first_rank == 6);
  CHECK(back.nproc == 3);
  CHECK(back.world_size == 9);
  CHECK(back.rank0_addr == "10.0.0.1");
  CHECK(back.worker_port == 6000);
  CHECK(back.worker_addr.empty());
}

TEST_CASE("an assignment's size does not grow with the round's") {
  std::vector<node_descriptor> few(2, node("10.0.0.1", 1, 8, -1, 0));
  std::vector<node_descriptor> many(10000, node("10.0.0.1", 1, 8, -1, 0));
  for (std::size_t i = 0; i < many.size(); ++i) many[i].pid = static_cast<long>(i);
  auto small = to_text(make_assignments(few, worker_store_choice::the_host).back());
  auto large = to_text(make_assignments(many, worker_store_choice::the_host).back());
  CHECK(large.size() < small.size() + 16);  // a few more digits, no table
  CHECK(assignment_from_text(large).world_size == 80000);
}

TEST_CASE("etcd: the workers meet at group rank 0's store") {
  std::vector<node_descriptor> nodes = {node("10.0.0.2", 7, 2, -1, 7002),
                                        node("10.0.0.1", 9, 2, -1, 7001)};
  auto a = make_assignments(nodes, worker_store_choice::group_rank_0).at(0);
  CHECK(a.worker_port == 7001);
  CHECK(a.worker_addr == "10.0.0.1");
}

TEST_CASE("a corrupt or impossible assignment is an error, not a crash") {
  CHECK_THROWS(assignment_from_text("{}"));
  CHECK_THROWS(assignment_from_text("not json"));
  const std::string ok =
      R"({"rank":1,"first":4,"nproc":2,"world":9,"rank0_addr":"a","rank0_port":0,"worker_port":1})";
  CHECK(assignment_from_text(ok).first_rank == 4);
  // An older closer wrote no ring successor: not known, not an error.
  CHECK(assignment_from_text(ok).successor_arrival == 0);
  auto with = [&](const std::string& from, const std::string& to) {
    auto text = ok;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  CHECK_THROWS(assignment_from_text(with("\"first\":4", "\"first\":8")));  // past the world
  CHECK_THROWS(assignment_from_text(with("\"nproc\":2", "\"nproc\":0")));
  CHECK_THROWS(assignment_from_text(with("\"rank\":1", "\"rank\":-1")));
  CHECK_THROWS(assignment_from_text(with("\"world\":9", "\"world\":-2147483648")));
  CHECK_THROWS(assignment_from_text(with("\"worker_port\":1", "\"worker_port\":70000")));
  CHECK_THROWS(assignment_from_text(with("\"worker_port\":1", "\"worker_port\":1,\"next\":-3")));
  CHECK_THROWS(assignment_from_text(with("\"worker_port\":1", "\"worker_port\":1,\"next\":\"x\"")));
}
