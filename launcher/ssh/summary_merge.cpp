#include "launcher/ssh/summary_merge.h"

#include <algorithm>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::launcher {
namespace {

constexpr std::string_view agent_prefix = "dtrun: ";
constexpr std::string_view stopped_prefix = "dtrun: stopped by dtrun";
constexpr std::string_view exit_prefix = "dtrun:   exit ";
constexpr std::string_view exit_code_words = "exit code ";

}  // namespace

bool is_summary_rule(std::string_view line) {
  if (line.rfind(agent_prefix, 0) != 0) return false;
  std::string_view rest = line.substr(agent_prefix.size());
  return rest.size() >= 10 && rest.find_first_not_of('=') == std::string_view::npos;
}

std::vector<std::string> merge_summaries(const std::vector<std::vector<std::string>>& blocks) {
  std::vector<std::string> merged = blocks.front();
  for (std::size_t b = 1; b < blocks.size(); ++b) {
    for (const auto& line : blocks[b]) {
      if (line.rfind(stopped_prefix, 0) != 0) continue;
      if (std::find(merged.begin(), merged.end(), line) != merged.end()) continue;
      merged.insert(merged.end() - 1, line);
    }
  }
  return merged;
}

std::optional<int> summary_exit_code(const std::vector<std::string>& block) {
  for (const auto& line : block) {
    if (line.rfind(exit_prefix, 0) != 0) continue;
    auto at = line.rfind(exit_code_words);
    if (at == std::string::npos) return std::nullopt;
    std::string_view digits = std::string_view(line).substr(at + exit_code_words.size());
    return parse_whole<int>(digits);
  }
  return std::nullopt;
}

}  // namespace dtrun::launcher
