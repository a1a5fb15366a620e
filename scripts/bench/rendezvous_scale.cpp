// N agents' rendezvous handlers meeting in a store the first hosts: the
// protocol's cost without process start-up. Prints one JSON line: nodes,
// seconds from start to every node having its rank (and when half and 90%
// had it), and the store requests and bytes (both directions) the round
// took, in all and per node.
//
//   rendezvous_scale --nodes 1024                       # one process, one loop
//   rendezvous_scale --nodes 16384 --client-processes 2
//   rendezvous_scale --nodes 10000 --store-threads 1    # the store on its own thread
//   rendezvous_scale --nodes 10000 --work-intervals 3   # then the stragglers' traffic
//
// --work-intervals K: after the round, K intervals of straggler figures
// (rendezvous_scale_work.h), one JSON line each; the other nodes then run
// in at least one client process, so that this one's CPU time is the
// store's and node 0's.
//
// One process holds two descriptors per node (the node's connection and the
// store's end of it), so past half the descriptor limit the nodes other
// than the store's host run in client processes, each on its own loop (the
// default then): the store's process then holds one descriptor per node.
// The processes start together on a "go" line; times are CLOCK_MONOTONIC,
// which all processes share.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/process/child.hpp>
#include <boost/process/io.hpp>
#include <boost/process/pipe.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/base/parse_whole.h"
#include "scripts/bench/rendezvous_scale_work.h"

using namespace dtrun::rendezvous;
namespace bp = boost::process;

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The soft descriptor limit, raised as far as the hard one allows.
rlim_t raise_file_limit() {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  return files.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 30 : files.rlim_cur;
}

constexpr rlim_t spare_descriptors = 64;

// --store-threads: the host's store on threads of its own
// (--rdzv-conf store_threads).
unsigned host_store_threads = 0;

// One agent of an N-node round; the one with host_store hosts the store.
std::unique_ptr<dynamic_rendezvous> make_agent(boost::asio::io_context& io, int nodes,
                                               std::uint16_t port, bool host_store) {
  dynamic_rendezvous_options o;
  o.run_id = "scale";
  o.endpoint_host = "127.0.0.1";
  o.endpoint_port = port;
  o.host_store = host_store;
  o.store_threads = host_store ? host_store_threads : 0;
  o.min_nodes = o.max_nodes = nodes;
  o.join_timeout = std::chrono::seconds(120);
  o.close_timeout = std::chrono::seconds(120);
  o.keep_alive_interval = std::chrono::hours(1);  // not part of the round
  o.log = [](const std::string&) {};
  return std::make_unique<dynamic_rendezvous>(io, o);
}

// --work-intervals.
int work_intervals = 0;

// Starts every agent's round; `on_all` runs (on the loop) once all have an
// outcome, with the failure count. `finished` gets each node's time,
// `group_ranks` each agent's rank (by agent).
void start_rounds(std::vector<std::unique_ptr<dynamic_rendezvous>>& agents,
                  std::vector<std::int64_t>& finished, std::vector<int>& group_ranks,
                  std::function<void(int failed)> on_all) {
  auto failed = std::make_shared<int>(0);
  group_ranks.assign(agents.size(), -1);
  for (std::size_t i = 0; i < agents.size(); ++i) {
    agents[i]->next_round([&finished, &group_ranks, i, failed, total = agents.size(), on_all](
                              std::exception_ptr e, rendezvous_info info) {
      if (!e) group_ranks[i] = info.group_rank;
      if (e && ++*failed == 1) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          fmt::print(stderr, "rendezvous_scale: a node failed: {}\n", x.what());
        }
      }
      finished.push_back(now_ns());
      if (finished.size() == total) on_all(*failed);
    });
  }
}

void print_result(int nodes, std::int64_t start, std::vector<std::int64_t> finished, int failed,
                  const store_server_stats& stats) {
  std::sort(finished.begin(), finished.end());
  auto seconds = [&](double q) {
    return static_cast<double>(finished[static_cast<std::size_t>(q * (finished.size() - 1))] -
                               start) /
           1e9;
  };
  auto bytes = stats.bytes_received + stats.bytes_sent;
  fmt::print("{{\"nodes\": {}, \"seconds\": {:.4f}, \"p50\": {:.4f}, \"p90\": {:.4f}, "
             "\"failed\": {}, \"store_requests\": {}, \"requests_per_node\": {:.1f}, "
             "\"store_bytes\": {}, \"bytes_per_node\": {:.0f}}}\n",
             nodes, seconds(1.0), seconds(0.5), seconds(0.9), failed, stats.requests,
             static_cast<double>(stats.requests) / nodes, bytes,
             static_cast<double>(bytes) / nodes);
}

// Everything on one loop, in this process. The store's figures leave out
// what the last nodes sent after their rank (the will, the WAIT on `over`)
// if the store had not read it when the round ended.
int run_in_process(int nodes) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<dynamic_rendezvous>> agents;
  agents.push_back(make_agent(io, nodes, 0, true));
  auto port = agents[0]->store_port();
  for (int i = 1; i < nodes; ++i) agents.push_back(make_agent(io, nodes, port, false));
  std::vector<std::int64_t> finished;
  std::vector<int> ranks;
  int failed = 0;
  auto start = now_ns();
  start_rounds(agents, finished, ranks, [&](int f) {
    failed = f;
    for (auto& a : agents) a->shutdown();
  });
  io.run();
  print_result(nodes, start, finished, failed, agents[0]->store_stats());
  return failed == 0 ? 0 : 1;
}

// After the round, a client process's agents share their work figures on
// each "work <k>" and say "shared <answered> <bytes read>", until "exit".
void serve_work(boost::asio::io_context& io, std::vector<std::unique_ptr<dynamic_rendezvous>>& agents,
                const std::vector<int>& ranks, int nodes) {
  std::string line;
  while (std::getline(std::cin, line) && line.rfind("work ", 0) == 0) {
    const int interval = dtrun::parse_whole<int>(std::string_view(line).substr(5)).value_or(0);
    int answered = 0;
    std::uint64_t read = 0;
    io.restart();
    scale_work::share_all(io, agents, ranks, interval, scale_work::slow_node_of(nodes),
                          std::chrono::seconds(120), [&](int a, std::uint64_t r) {
                            answered = a;
                            read = r;
                            io.stop();
                          });
    io.run();
    std::cout << "shared " << answered << ' ' << read << std::endl;
  }
}

// A client process: `count` agents of the round. Says "ready", starts on
// "go", says "done <failed> <finish times>", and holds its connections
// until "exit" (a node that leaves early would end the round for others);
// serve_work() between the two.
int run_client(int nodes, std::uint16_t port, int count) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<dynamic_rendezvous>> agents;
  for (int i = 0; i < count; ++i) agents.push_back(make_agent(io, nodes, port, false));
  std::cout << "ready" << std::endl;
  std::string line;
  if (!std::getline(std::cin, line) || line != "go") return 2;
  std::vector<std::int64_t> finished;
  std::vector<int> ranks;
  int failed = 0;
  start_rounds(agents, finished, ranks, [&](int f) {
    failed = f;
    io.stop();
  });
  io.run();
  std::cout << "done " << failed;
  for (auto t : finished) std::cout << ' ' << t;
  std::cout << std::endl;
  serve_work(io, agents, ranks, nodes);  // until "exit", or the parent is gone
  for (auto& a : agents) a->shutdown();
  return 0;
}

struct client_process {
  bp::opstream to;
  bp::ipstream from;
  bp::child process;
};

// Each client's "done <failed> <finish times>" into `finished`: the
// failures, or -1 when a client died.
int collect_clients(std::vector<std::unique_ptr<client_process>>& clients,
                    std::vector<std::int64_t>& finished) {
  int failed = 0;
  std::string line;
  for (auto& c : clients) {
    if (!std::getline(c->from, line)) {
      fmt::print(stderr, "rendezvous_scale: a client process died\n");
      return -1;
    }
    std::istringstream words(line);
    std::string done;
    int f = 0;
    words >> done >> f;
    failed += f;
    for (std::int64_t t; words >> t;) finished.push_back(t);
  }
  return failed;
}

// --work-intervals after the round: the clients' nodes share on "work <k>".
int run_work(boost::asio::io_context& io, dynamic_rendezvous& node0, int nodes,
             std::vector<std::unique_ptr<client_process>>& clients) {
  auto others_share = [&clients](int interval) {
    for (auto& c : clients) c->to << "work " << interval << std::endl;
    std::pair<int, std::uint64_t> sum{0, 0};
    std::string line, word;
    for (auto& c : clients) {
      int answered = 0;
      std::uint64_t read = 0;
      if (!std::getline(c->from, line)) continue;  // a dead client answered nobody
      std::istringstream(line) >> word >> answered >> read;
      sum.first += answered;
      sum.second += read;
    }
    return sum;
  };
  return scale_work::measure_intervals(io, node0, nodes, work_intervals, others_share);
}

// The store's host here, the other nodes in `processes` client processes.
int run_spread(int nodes, int processes, const std::string& self) {
  boost::asio::io_context io;
  auto host = make_agent(io, nodes, 0, true);
  auto port = host->store_port();
  std::vector<std::unique_ptr<client_process>> clients;
  int others = nodes - 1;
  for (int k = 0; k < processes; ++k) {
    int count = others / processes + (k < others % processes ? 1 : 0);
    auto c = std::make_unique<client_process>();
    c->process = bp::child(self, "--nodes", std::to_string(nodes), "--store-port",
                           std::to_string(port), "--count", std::to_string(count),
                           bp::std_in < c->to, bp::std_out > c->from);
    clients.push_back(std::move(c));
  }
  std::string line;
  for (auto& c : clients) {
    if (!std::getline(c->from, line) || line != "ready") {
      fmt::print(stderr, "rendezvous_scale: a client process did not start\n");
      return 2;
    }
  }
  std::vector<std::int64_t> finished, host_finished;  // the latter written by the loop's thread
  std::vector<int> host_rank;
  std::promise<int> host_done;
  std::thread loop([&] { io.run(); });
  auto start = now_ns();
  for (auto& c : clients) c->to << "go" << std::endl;
  std::vector<std::unique_ptr<dynamic_rendezvous>> hosted;
  hosted.push_back(std::move(host));
  boost::asio::post(io, [&] {
    start_rounds(hosted, host_finished, host_rank, [&](int f) { host_done.set_value(f); });
  });
  int failed = collect_clients(clients, finished);
  if (failed < 0) return 2;
  failed += host_done.get_future().get();
  finished.insert(finished.end(), host_finished.begin(), host_finished.end());
  int work_failed = 0;
  if (work_intervals > 0 && failed == 0) {
    // Ranks go by (address, pid): the store's host, started first, is node 0
    // unless pids wrapped; node 0 must be here, where the store is measured.
    if (host_rank[0] != 0) {
      fmt::print(stderr, "rendezvous_scale: the store's host is node {}, not 0\n", host_rank[0]);
      work_failed = 1;
    } else {
      print_result(nodes, start, finished, failed, scale_work::stats_on_loop(io, *hosted[0]));
      work_failed = run_work(io, *hosted[0], nodes, clients);
    }
  }
  for (auto& c : clients) c->to << "exit" << std::endl;
  for (auto& c : clients) c->process.wait();
  boost::asio::post(io, [&] {
    hosted[0]->shutdown();
    io.stop();
  });
  loop.join();
  if (work_intervals == 0 || failed != 0) {
    print_result(nodes, start, finished, failed, hosted[0]->store_stats());
  }
  return failed == 0 && work_failed == 0 ? 0 : 1;
}

// N nodes on one machine connect from one address, so each takes an
// ephemeral port; past about half of the range the kernel's search for a
// free one slows every connect() (16,384 nodes: 6 s with 32768-60999,
// 2.9 s with 1024-65535). A cluster, one address per node, has no such
// limit: say so rather than let it pass for the rendezvous' cost.
void warn_if_ports_run_short(int nodes) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  long low = 0, high = 0;
  if (!(range >> low >> high) || high <= low) return;
  const long ports = high - low + 1;
  if (2L * nodes > ports) {
    fmt::print(stderr,
               "rendezvous_scale: note: {} connections from this one machine use {}% of its {} "
               "ephemeral ports ({}-{}), which slows connect(); for figures a cluster would see: "
               "sysctl net.ipv4.ip_local_port_range=\"1024 65535\"\n",
               nodes, 100L * nodes / ports, ports, low, high);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rendezvous at scale, without process start-up"};
  int nodes = 64;
  int processes = -1;
  int store_port = 0, count = 0;
  app.add_option("--nodes", nodes, "agents")->check(CLI::Range(1, 100000));
  app.add_option("--client-processes", processes,
                 "processes for the nodes other than the store's host (0: all in this one; "
                 "default: 0 when the descriptor limit allows)")
      ->check(CLI::Range(0, 64));
  app.add_option("--store-threads", host_store_threads,
                 "threads of the host's store's own (0: on the host agent's loop)")
      ->check(CLI::Range(0, 64));
  app.add_option("--work-intervals", work_intervals,
                 "after the round, intervals of straggler figures shared and judged "
                 "(rendezvous_scale_work.h)")
      ->check(CLI::Range(0, 1000));
  // A client process's own options (run_spread starts them).
  app.add_option("--store-port", store_port)->group("");
  app.add_option("--count", count)->group("");
  CLI11_PARSE(app, argc, argv);

  const auto limit = raise_file_limit();
  if (store_port > 0) return run_client(nodes, static_cast<std::uint16_t>(store_port), count);
  warn_if_ports_run_short(nodes);

  const auto in_one = 2 * static_cast<rlim_t>(nodes) + spare_descriptors;
  const auto per_client = limit - spare_descriptors;
  if (processes < 0) {
    processes = in_one <= limit ? 0 : static_cast<int>((nodes - 1 + per_client - 1) / per_client);
  }
  if (work_intervals > 0) processes = std::max(processes, 1);
  const auto store_needs = processes == 0 ? in_one : nodes + spare_descriptors;
  const auto client_needs =
      processes == 0 ? 0 : (nodes - 1 + processes - 1) / processes + spare_descriptors;
  if (store_needs > limit || static_cast<rlim_t>(client_needs) > limit) {
    fmt::print(stderr,
               "rendezvous_scale: {} nodes need about {} file descriptors in the store's process "
               "and {} in each client process; the limit here is {} (ulimit -Hn): use more "
               "--client-processes, or at most {} nodes\n",
               nodes, store_needs, client_needs, limit, limit - spare_descriptors);
    return 2;
  }
  if (processes == 0) return run_in_process(nodes);
  return run_spread(nodes, processes, std::filesystem::read_symlink("/proc/self/exe").string());
}
