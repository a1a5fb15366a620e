#include "agent/monitor/job_census.h"

#include <algorithm>
#include <map>
#include <string>

namespace dtrun::agent {

std::int64_t spare_count(std::int64_t joined, std::int64_t closed) {
  if (closed <= 0) return 0;
  return std::max<std::int64_t>(0, joined - closed);
}

std::vector<quarantine_record> current_quarantines(const std::vector<quarantine_record>& list,
                                                   double now) {
  // The latest record of each machine, by its index in `list`.
  std::map<std::string, std::size_t> latest;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto [it, fresh] = latest.emplace(list[i].machine, i);
    const auto& held = list[it->second];
    if (!fresh && (list[i].quarantines > held.quarantines ||
                   (list[i].quarantines == held.quarantines && list[i].since >= held.since))) {
      it->second = i;
    }
  }
  std::vector<std::size_t> chosen;
  for (const auto& [machine, i] : latest) {
    if (list[i].until > now) chosen.push_back(i);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<quarantine_record> out;
  for (auto i : chosen) out.push_back(list[i]);
  return out;
}

}  // namespace dtrun::agent
