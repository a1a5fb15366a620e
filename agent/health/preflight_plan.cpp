#include "agent/health/preflight_plan.h"

#include <cstddef>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

namespace {

std::size_t index(int node) { return static_cast<std::size_t>(node); }

// Round k (distance `bit`): the hypercube's pairs, the nodes without one
// paired in order, and an odd one left over in a second step.
std::vector<preflight_step> round_steps(int nodes, int bit) {
  preflight_step first{std::vector<int>(index(nodes), -1)};
  std::vector<int> unpaired;
  for (int g = 0; g < nodes; ++g) {
    int partner = g ^ bit;
    if (partner < nodes) {
      first.partner[index(g)] = partner;
    } else {
      unpaired.push_back(g);
    }
  }
  for (std::size_t i = 0; i + 1 < unpaired.size(); i += 2) {
    first.partner[index(unpaired[i])] = unpaired[i + 1];
    first.partner[index(unpaired[i + 1])] = unpaired[i];
  }
  std::vector<preflight_step> steps{first};
  if (unpaired.size() % 2 == 1) {
    // bit < nodes, so the partner is another node; it was busy in the
    // first step, hence a step of its own.
    int left = unpaired.back();
    int partner = ((left - bit) % nodes + nodes) % nodes;
    preflight_step second{std::vector<int>(index(nodes), -1)};
    second.partner[index(left)] = partner;
    second.partner[index(partner)] = left;
    steps.push_back(second);
  }
  return steps;
}

}  // namespace

std::vector<std::vector<preflight_step>> preflight_rounds(int nodes) {
  std::vector<std::vector<preflight_step>> rounds;
  for (int bit = 1; bit < nodes; bit *= 2) rounds.push_back(round_steps(nodes, bit));
  return rounds;
}

std::vector<int> partners_of(const std::vector<std::vector<preflight_step>>& rounds, int node) {
  std::vector<int> partners;
  for (const auto& round : rounds) {
    for (const auto& step : round) partners.push_back(step.partner.at(index(node)));
  }
  return partners;
}

std::string preflight_plan::to_json() const {
  nlohmann::json j{{"version", 1},
                   {"node", node},
                   {"nodes", nodes},
                   {"partners", partners},
                   {"payload_bytes", payload_bytes},
                   {"repeats", repeats},
                   {"result_path", result_path},
                   {"backend", backend},
                   {"store_prefix", store_prefix},
                   {"timeout_s", timeout_s}};
  return j.dump();
}

}  // namespace dtrun::agent
