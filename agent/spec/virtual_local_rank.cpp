#include "agent/spec/virtual_local_rank.h"

#include <vector>

#include <fmt/format.h>

#include "rendezvous/base/trim.h"

namespace dtrun::agent {
std::string virtual_visible_device(int local_rank, const std::optional<std::string>& parent,
                                   std::string_view variable) {
  if (!parent) return std::to_string(local_rank);
  // As Python's str.split(","): "" is one empty entry, "0,1" two.
  std::vector<std::string> devices;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = parent->find(',', start);
    devices.push_back(parent->substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= devices.size()) {
    throw no_visible_device(fmt::format(
        "--virtual-local-rank: local rank {} has no device of its own: {}='{}' lists {}; run at "
        "most {} worker(s) per node or list more devices",
        local_rank, variable, *parent, devices.size(), devices.size()));
  }
  return std::string(trim(devices[static_cast<std::size_t>(local_rank)]));  // Python's str.strip()
}

}  // namespace dtrun::agent
