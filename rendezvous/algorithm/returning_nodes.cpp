#include "rendezvous/algorithm/returning_nodes.h"

#include <algorithm>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

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
