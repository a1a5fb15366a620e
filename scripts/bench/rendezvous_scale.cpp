// N agents' rendezvous handlers in one process on one event loop, meeting
// in a store the first hosts: the protocol's cost without process start-up.
// Prints one JSON line: nodes, seconds from start to every node having its
// rank, and the store requests the round took (all, and per node).
//
//   rendezvous_scale --nodes 1024
#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/dynamic_rendezvous.h"

using namespace dtrun::rendezvous;

int main(int argc, char** argv) {
  CLI::App app{"in-process rendezvous at scale"};
  int nodes = 64;
  app.add_option("--nodes", nodes, "agents")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  boost::asio::io_context io;
  std::vector<std::unique_ptr<dynamic_rendezvous>> agents;
  std::uint16_t port = 0;
  for (int i = 0; i < nodes; ++i) {
    dynamic_rendezvous_options o;
    o.run_id = "scale";
    o.endpoint_host = "127.0.0.1";
    o.endpoint_port = port;
    o.host_store = i == 0;
    o.min_nodes = o.max_nodes = nodes;
    o.join_timeout = std::chrono::seconds(120);
    o.close_timeout = std::chrono::seconds(120);
    o.keep_alive_interval = std::chrono::hours(1);  // not part of the round
    o.log = [](const std::string&) {};
    agents.push_back(std::make_unique<dynamic_rendezvous>(io, o));
    if (i == 0) port = agents[0]->store_port();
  }
  int completed = 0, failed = 0;
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point end;
  for (auto& a : agents) {
    a->next_round([&](std::exception_ptr e, rendezvous_info) {
      if (e) ++failed;
      if (++completed == nodes) {
        end = std::chrono::steady_clock::now();
        for (auto& x : agents) x->shutdown();
      }
    });
  }
  io.run();
  auto requests = agents[0]->store_requests();
  fmt::print("{{\"nodes\": {}, \"seconds\": {:.4f}, \"failed\": {}, \"store_requests\": {}, "
             "\"requests_per_node\": {:.1f}}}\n",
             nodes, std::chrono::duration<double>(end - start).count(), failed, requests,
             static_cast<double>(requests) / nodes);
  return failed == 0 ? 0 : 1;
}
