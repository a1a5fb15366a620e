#include "agent/devices/cpu_list.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

int parse_cpu(std::string_view text, std::string_view whole) {
  auto value = parse_whole<int>(text);
  if (!value || *value < 0) {
    throw std::invalid_argument(fmt::format("'{}' is not a CPU list like 0-3,8", whole));
  }
  return *value;
}

}  // namespace

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(std::string_view text) {
  std::string compact;
  for (char c : text) {
    if (c != ' ' && c != '\t' && c != '\n') compact += c;
  }
  // A bound on the range size: sysfs lists never name more CPUs than this.
  constexpr int max_cpu = 1 << 20;
  std::vector<int> cpus;
  std::string_view rest = compact;
  while (!rest.empty()) {
    std::size_t comma = std::min(rest.find(','), rest.size());
    std::string_view item = rest.substr(0, comma);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
    std::size_t dash = item.find('-');
    int lo = parse_cpu(item.substr(0, dash), text);
    int hi = dash == std::string_view::npos ? lo : parse_cpu(item.substr(dash + 1), text);
    if (hi < lo || hi > max_cpu) {
      throw std::invalid_argument(fmt::format("'{}' is not a CPU list like 0-3,8", text));
    }
    for (int cpu = lo; cpu <= hi; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

}  // namespace dtrun::agent
