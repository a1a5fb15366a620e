// N agents' rendezvous handlers in one process on one event loop, meeting
// in a store the first hosts: the protocol's cost without process start-up.
// Prints one JSON line: nodes, seconds from start to every node having its
// rank, and the store requests and bytes (both directions) the round
// took, in all and per node.
//
//   rendezvous_scale --nodes 1024
#include <sys/resource.h>

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

  // Each node holds two connections (its operations, and its waits), and
  // the store the other ends: four descriptors per node, in this process.
  // Raise the soft limit as far as the hard one allows, and say so up
  // front rather than let the store fail accept() thousands of times.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  const auto needed = 4 * static_cast<rlim_t>(nodes) + 64;
  if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < needed) {
    fmt::print(stderr,
               "rendezvous_scale: {} nodes need about {} file descriptors in one process; the "
               "limit here is {} (ulimit -Hn): at most {} nodes\n",
               nodes, needed, files.rlim_cur, (files.rlim_cur - 64) / 4);
    return 2;
  }

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
  auto stats = agents[0]->store_stats();
  auto bytes = stats.bytes_received + stats.bytes_sent;
  fmt::print("{{\"nodes\": {}, \"seconds\": {:.4f}, \"failed\": {}, \"store_requests\": {}, "
             "\"requests_per_node\": {:.1f}, \"store_bytes\": {}, \"bytes_per_node\": {:.0f}}}\n",
             nodes, std::chrono::duration<double>(end - start).count(), failed, stats.requests,
             static_cast<double>(stats.requests) / nodes, bytes,
             static_cast<double>(bytes) / nodes);
  return failed == 0 ? 0 : 1;
}
