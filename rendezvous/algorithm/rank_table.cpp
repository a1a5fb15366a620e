#include "rendezvous/algorithm/rank_table.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rendezvous/record/round_record.h"

namespace dtrun::rendezvous {

using json = nlohmann::json;

namespace {

std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// j.at(name).get_to(into) for each (name, into) pair, in order: the first
// one missing or of the wrong type throws.
void read_required(const json&) {}

template <typename T, typename... Rest>
void read_required(const json& j, const char* name, T& into, Rest&&... rest) {
  j.at(name).get_to(into);
  read_required(j, std::forward<Rest>(rest)...);
}

}  // namespace

std::string to_text(const node_descriptor& d) {
  return compact(json{{"addr", d.addr}, {"host", d.hostname}, {"pid", d.pid}, {"nproc", d.nproc},
                      {"prev_rank", d.prev_rank}, {"master_port", d.master_port},
                      {"worker_store_port", d.worker_store_port}, {"records", d.records}});
}

node_descriptor descriptor_from_text(const std::string& text) {
  auto j = json::parse(text);
  node_descriptor d;
  read_required(j, "addr", d.addr, "host", d.hostname, "pid", d.pid, "nproc", d.nproc,
                "prev_rank", d.prev_rank);
  d.master_port = j.value("master_port", 0);
  // Absent in descriptors of older dtrun versions: no worker store.
  d.worker_store_port = j.value("worker_store_port", 0);
  d.records = j.value("records", 0);
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

std::vector<rank_assignment> make_assignments(const std::vector<node_descriptor>& nodes,
                                              worker_store_choice choice) {
  auto ranks = assign_ranks(nodes);
  const std::size_t n = nodes.size();
  // Arrival index by group rank, then each rank's first global rank.
  std::vector<std::size_t> at_rank(n);
  for (std::size_t i = 0; i < n; ++i) at_rank[static_cast<std::size_t>(ranks[i])] = i;
  std::vector<int> first(n);
  int world = 0;
  for (std::size_t g = 0; g < n; ++g) {
    first[g] = world;
    world += nodes[at_rank[g]].nproc;
  }
  rank_assignment common;
  common.world_size = world;
  if (n > 0) {
    const auto& rank0 = nodes[at_rank[0]];
    common.rank0_addr = rank0.addr;
    common.rank0_port = rank0.master_port;
    if (choice == worker_store_choice::group_rank_0) {
      common.worker_port = rank0.worker_store_port;
      common.worker_addr = rank0.addr;
    } else {
      // The one node that opened a store (the endpoint's host).
      for (const auto& d : nodes) {
        if (d.worker_store_port != 0) {
          common.worker_port = d.worker_store_port;
          break;
        }
      }
    }
  }
  if (n > 0) {
    common.records_min = common.records_max = nodes[0].records;
  }
  for (const auto& d : nodes) {
    common.records_min = std::min(common.records_min, d.records);
    common.records_max = std::max(common.records_max, d.records);
    if (d.records != records::record_version && common.odd_host.empty()) {
      common.odd_host = d.hostname;
    }
  }
  std::vector<rank_assignment> out(n, common);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].group_rank = ranks[i];
    out[i].first_rank = first[static_cast<std::size_t>(ranks[i])];
    out[i].nproc = nodes[i].nproc;
    auto successor = static_cast<std::size_t>(ranks[i] + 1) % n;
    out[i].successor_arrival = static_cast<int>(at_rank[successor]) + 1;
  }
  return out;
}

std::string to_text(const rank_assignment& a) {
  json j{{"rank", a.group_rank}, {"first", a.first_rank}, {"nproc", a.nproc},
         {"world", a.world_size}, {"rank0_addr", a.rank0_addr}, {"rank0_port", a.rank0_port},
         {"worker_port", a.worker_port}, {"next", a.successor_arrival}};
  // Absent: the endpoint host's store.
  if (!a.worker_addr.empty()) j["worker_addr"] = a.worker_addr;
  j["records_min"] = a.records_min;
  j["records_max"] = a.records_max;
  if (!a.odd_host.empty()) j["odd_host"] = a.odd_host;
  return compact(j);
}

rank_assignment assignment_from_text(const std::string& text) {
  auto j = json::parse(text);
  rank_assignment a;
  read_required(j, "rank", a.group_rank, "first", a.first_rank, "nproc", a.nproc, "world",
                a.world_size, "rank0_addr", a.rank0_addr, "rank0_port", a.rank0_port,
                "worker_port", a.worker_port);
  a.worker_addr = j.value("worker_addr", std::string());
  a.successor_arrival = j.value("next", 0);
  // Absent when a closer of an older dtrun wrote it: format 0.
  a.records_min = j.value("records_min", 0);
  a.records_max = j.value("records_max", 0);
  a.odd_host = j.value("odd_host", std::string());
  // Workers get these as RANK/WORLD_SIZE: nonsense must not reach them.
  if (a.group_rank < 0 || a.nproc < 1 || a.world_size < a.nproc || a.first_rank < 0 ||
      a.first_rank > a.world_size - a.nproc) {
    throw std::out_of_range("ranks");
  }
  if (a.worker_port < 0 || a.worker_port > 65535 || a.rank0_port < 0 || a.rank0_port > 65535) {
    throw std::out_of_range("port");
  }
  if (a.successor_arrival < 0) throw std::out_of_range("next");
  return a;
}

}  // namespace dtrun::rendezvous
