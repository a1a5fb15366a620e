// The standalone handler's rounds, on a real event loop. (The agent's
// policy over a rendezvous is tested in elastic_agent_test.cpp.)
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "rendezvous/algorithm/standalone_rendezvous.h"

using namespace dtrun;

TEST_CASE("standalone rounds complete on the loop, one node, loopback store") {
  boost::asio::io_context io;
  rendezvous::standalone_rendezvous rdzv(io, {"run-1", 3, "127.0.0.1", 0});
  CHECK(rdzv.run_id() == "run-1");
  CHECK(rdzv.store_port() != 0);
  std::vector<rendezvous::rendezvous_info> rounds;
  auto record = [&](std::exception_ptr error, rendezvous::rendezvous_info info) {
    CHECK_FALSE(error);
    rounds.push_back(info);
  };
  rdzv.next_round(record);
  CHECK(rounds.empty());  // never completes inside next_round()
  rdzv.next_round(record);
  io.run_one();
  io.run_one();
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0].round == 0);
  CHECK(rounds[1].round == 1);
  CHECK(rounds[1].group_rank == 0);
  CHECK(rounds[1].group_world_size == 1);
  CHECK(rounds[1].local_world_size == 3);
  CHECK(rounds[1].world_size == 3);
  CHECK(rounds[1].first_rank == 0);
  CHECK(rounds[1].master_addr == "127.0.0.1");
  CHECK(rounds[1].master_port == rdzv.store_port());
  CHECK(rounds[1].store_port == rdzv.store_port());
  rdzv.shutdown();
  rdzv.shutdown();  // idempotent
}
