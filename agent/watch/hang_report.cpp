#include "agent/watch/hang_report.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include <fmt/format.h>

#include "agent/watch/stack_dump.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

std::set<int> hang_culprits(const std::vector<captured_stack>& stacks,
                            const std::vector<int>& live) {
  using group = std::vector<const captured_stack*>;
  std::map<std::string, group> groups;  // where -> the ranks stuck there
  for (const auto& c : stacks) {
    if (!c.exited) groups[stuck_at(c.summary())].push_back(&c);
  }
  std::size_t smallest = SIZE_MAX;
  for (const auto& g : groups) smallest = std::min(smallest, g.second.size());
  std::vector<const group*> chosen;
  for (const auto& g : groups) {
    if (g.second.size() == smallest) chosen.push_back(&g.second);
  }
  if (groups.size() > 1 && chosen.size() > 1) {
    auto in_own_code = [](const group* g) {
      const captured_stack* c = g->front();
      return c->innermost && is_user_file(c->innermost->file);
    };
    std::vector<const group*> own;
    std::copy_if(chosen.begin(), chosen.end(), std::back_inserter(own), in_own_code);
    if (!own.empty() && own.size() < chosen.size()) chosen = own;
  }
  std::set<int> culprits;
  // Every group is one place: nobody stands apart, everyone is a culprit.
  bool apart = groups.size() > 1 && chosen.size() < groups.size();
  if (apart) {
    for (const group* g : chosen) {
      for (const captured_stack* c : *g) culprits.insert(c->local_rank);
    }
  } else {
    culprits.insert(live.begin(), live.end());
  }
  return culprits;
}

hang_report make_hang_report(const std::vector<captured_stack>& stacks,
                             const std::vector<worker>& workers,
                             const std::function<std::string(int local_rank)>& file_of) {
  hang_report report;
  std::vector<rank_stack> ranks;
  for (const auto& c : stacks) {
    if (c.exited) continue;
    rank_stack r = c.summary();
    ranks.push_back(r);
    report.where[c.local_rank] = stuck_at(r);
  }
  std::vector<int> live;
  for (const auto& w : workers) {
    report.files[w.local_rank] = file_of(w.local_rank);
    if (w.alive()) live.push_back(w.local_rank);
  }
  if (!ranks.empty()) {
    report.summary_lines.push_back(
        fmt::format("hang summary (where each rank's main thread is; stacks in {}):",
                    printable(file_of(-1))));
    std::string text = hang_summary(ranks);
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      report.summary_lines.push_back("  " + text.substr(start, end - start));
      start = end + 1;
    }
  }
  report.culprits = hang_culprits(stacks, live);
  return report;
}

}  // namespace dtrun::agent
