#include "rendezvous/algorithm/returning_nodes.h"

#include <algorithm>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

namespace {

constexpr std::string_view node_prefix = "node ";

// The rank after "node " and what follows it, or nullopt.
std::optional<int> leading_rank(std::string_view text, std::string_view& rest) {
  if (!text.starts_with(node_prefix)) return std::nullopt;
  text.remove_prefix(node_prefix.size());
  auto end = text.find(' ');
  if (end == std::string_view::npos) return std::nullopt;
  auto rank = parse_whole<int>(text.substr(0, end));
  if (!rank || *rank < 0) return std::nullopt;
  rest = text.substr(end);
  return rank;
}

}  // namespace

std::string node_lost_reason(int rank, std::string_view addr) {
  return fmt::format("node {} ({}) was lost", rank, addr);
}

std::string node_silent_reason(int rank) {
  return fmt::format("node {} stopped sending heartbeats", rank);
}

std::string node_left_reason(int rank, std::string_view host, std::string_view why) {
  return fmt::format("node {} (host {}) left the job: {}", rank, host, why);
}

std::optional<int> departed_rank(std::string_view over) {
  std::string_view rest;
  auto rank = leading_rank(over, rest);
  if (!rank) return std::nullopt;
  // A worker failure reads "node K: ...": a colon right after the rank,
  // never one of these.
  if (rest == " stopped sending heartbeats") return rank;
  if (rest.starts_with(" (") && rest.ends_with(") was lost")) return rank;
  if (rest.starts_with(" (host ") && rest.find(") left the job: ") != std::string_view::npos) {
    return rank;
  }
  return std::nullopt;
}

std::string node_failed_reason(int rank, std::string_view why) {
  return fmt::format("node {}: {}", rank, why);
}

std::optional<int> failed_rank(std::string_view over) {
  if (!over.starts_with(node_prefix)) return std::nullopt;
  over.remove_prefix(node_prefix.size());
  auto colon = over.find(": ");
  if (colon == std::string_view::npos) return std::nullopt;
  auto rank = parse_whole<int>(over.substr(0, colon));
  if (!rank || *rank < 0) return std::nullopt;
  return rank;
}

std::string returning_nodes::to_text() const { return fmt::format("{} {}", arrivals, departed); }

std::optional<returning_nodes> returning_nodes::from_text(std::string_view text) {
  auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto arrivals = parse_whole<int>(text.substr(0, space));
  auto departed = parse_whole<int>(text.substr(space + 1));
  if (!arrivals || !departed || *arrivals < 0 || *departed < -1) return std::nullopt;
  return returning_nodes{*arrivals, *departed};
}

int closing_count(long long here, int max_nodes, int node_unit) {
  auto capped = std::min<long long>(here, max_nodes);
  auto unit = std::max(1, node_unit);
  return static_cast<int>(capped - capped % unit);
}

}  // namespace dtrun::rendezvous
