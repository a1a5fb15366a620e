#include "rendezvous/rank_table.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

namespace dtrun::rendezvous {

using json = nlohmann::json;

namespace {

std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string to_text(const node_descriptor& d) {
  return compact(json{{"addr", d.addr}, {"host", d.hostname}, {"pid", d.pid}, {"nproc", d.nproc},
                      {"prev_rank", d.prev_rank}, {"master_port", d.master_port},
                      {"worker_store_port", d.worker_store_port}});
}

node_descriptor descriptor_from_text(const std::string& text) {
  auto j = json::parse(text);
  node_descriptor d;
  j.at("addr").get_to(d.addr);
  j.at("host").get_to(d.hostname);
  j.at("pid").get_to(d.pid);
  j.at("nproc").get_to(d.nproc);
  j.at("prev_rank").get_to(d.prev_rank);
  d.master_port = j.value("master_port", 0);
  // Absent in descriptors of older dtrun versions: no worker store.
  d.worker_store_port = j.value("worker_store_port", 0);
  return d;
}

std::vector<int> assign_ranks(const std::vector<node_descriptor>& nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> rank(n, -1);
  std::vector<bool> taken(n, false);
  for (int i = 0; i < n; ++i) {
    int p = nodes[i].prev_rank;
    if (p >= 0 && p < n && !taken[p]) {
      rank[i] = p;
      taken[p] = true;
    }
  }
  std::vector<int> rest;
  for (int i = 0; i < n; ++i) {
    if (rank[i] < 0) rest.push_back(i);
  }
  std::sort(rest.begin(), rest.end(), [&](int a, int b) {
    return std::tie(nodes[a].addr, nodes[a].pid) < std::tie(nodes[b].addr, nodes[b].pid);
  });
  int next = 0;
  for (int i : rest) {
    while (taken[next]) ++next;
    rank[i] = next;
    taken[next] = true;
  }
  return rank;
}

std::string make_rank_table(const std::vector<node_descriptor>& nodes, worker_store_choice choice) {
  auto ranks = assign_ranks(nodes);
  std::vector<int> nproc(nodes.size());
  std::vector<std::string> addrs(nodes.size());
  std::vector<int> ports(nodes.size());
  int worker_port = 0;
  std::string worker_addr;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nproc[ranks[i]] = nodes[i].nproc;
    addrs[ranks[i]] = nodes[i].addr;
    ports[ranks[i]] = nodes[i].master_port;
    if (choice == worker_store_choice::group_rank_0) {
      if (ranks[i] == 0) {
        worker_port = nodes[i].worker_store_port;
        worker_addr = nodes[i].addr;
      }
    } else if (worker_port == 0) {
      worker_port = nodes[i].worker_store_port;
    }
  }
  json table{{"ranks", ranks}, {"nproc", nproc}, {"addrs", addrs}, {"ports", ports},
             {"worker_port", worker_port}};
  // Absent: the endpoint host's store (as older dtrun versions read it).
  if (!worker_addr.empty()) table["worker_addr"] = worker_addr;
  return compact(table);
}

rank_assignment read_rank_table(const std::string& text, int arrival) {
  auto table = json::parse(text);
  rank_assignment a;
  a.group_rank = table.at("ranks").at(arrival - 1).get<int>();
  a.local_world_sizes = table.at("nproc").get<std::vector<int>>();
  a.rank0_addr = table.at("addrs").at(0).get<std::string>();
  a.rank0_port = table.at("ports").at(0).get<int>();
  // Absent in tables of older dtrun versions.
  a.worker_port = table.value("worker_port", 0);
  a.worker_addr = table.value("worker_addr", std::string());
  if (a.worker_port < 0 || a.worker_port > 65535) throw std::out_of_range("worker_port");
  return a;
}

}  // namespace dtrun::rendezvous
