// The standalone handler and the agent loop together, on a real event
// loop with real (tiny) worker processes. (Here rather than under
// tests/unit/rendezvous/ because it exercises the agent's contract.)
#include <csignal>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/elastic_agent.h"
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

namespace {

int run_agent(const std::string& script, int nproc, int max_restarts) {
  boost::asio::io_context io;
  rendezvous::standalone_rendezvous rdzv(io, {"run-2", nproc, "127.0.0.1", 0});
  agent::agent_options options;
  options.spec.local_world_size = nproc;
  options.spec.max_restarts = max_restarts;
  options.spec.run_id = "run-2";
  options.program = "/bin/sh";
  options.args = {"-c", script};
  options.signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  options.log = [](const std::string&) {};
  agent::elastic_agent agent(io, options, rdzv);
  return agent.run();
}

}  // namespace

TEST_CASE("the agent returns 0 when every worker exits 0") {
  CHECK(run_agent("exit 0", 3, 0) == 0);
}

TEST_CASE("the agent returns the failing worker's code after its restarts") {
  CHECK(run_agent("[ $LOCAL_RANK = 1 ] && exit 4; exec sleep 100", 3, 0) == 4);
  // Fails on attempts 0 and 1, succeeds on attempt 2.
  CHECK(run_agent("[ $TORCHELASTIC_RESTART_COUNT -lt 2 ] && exit 4; exit 0", 2, 2) == 0);
  CHECK(run_agent("[ $TORCHELASTIC_RESTART_COUNT -lt 2 ] && exit 4; exit 0", 2, 1) == 4);
}

TEST_CASE("the agent reports a signalled worker as 128+n") {
  CHECK(run_agent("kill -USR2 $$", 1, 0) == 128 + SIGUSR2);
}
