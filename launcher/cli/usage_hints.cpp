#include "launcher/cli/usage_hints.h"

#include <algorithm>
#include <regex>
#include <set>

namespace dtrun::launcher {
namespace {

std::string dashes(std::string word) {
  std::replace(word.begin(), word.end(), '_', '-');
  return word;
}

}  // namespace

const std::vector<std::string>& subcommands() {
  static const std::vector<std::string> names = {"status", "stacks", "help"};
  return names;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> nearest_word(const std::string& word,
                                        const std::vector<std::string>& candidates) {
  // Typos are of words, not of the dashes in front.
  const std::string plain = dashes(word.substr(word.find_first_not_of('-') == std::string::npos
                                                   ? word.size()
                                                   : word.find_first_not_of('-')));
  if (plain.size() < 3) return std::nullopt;
  const std::size_t allowed = plain.size() < 5 ? 1 : 2;
  std::string stem = plain;
  if (stem.size() > 4 && stem.back() == 's') stem.pop_back();
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const auto& candidate : candidates) {
    std::string other = dashes(candidate.substr(std::min(candidate.find_first_not_of('-'),
                                                         candidate.size())));
    if (other == plain) continue;
    std::size_t distance = edit_distance(plain, other);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (best) return best;
  // "--nprocs": a flag written short, the way another launcher spells it.
  if (stem.size() >= 4) {
    for (const auto& candidate : candidates) {
      std::string other = dashes(candidate.substr(std::min(candidate.find_first_not_of('-'),
                                                           candidate.size())));
      if (other != plain && other.size() > stem.size() && other.rfind(stem, 0) == 0) {
        return candidate;
      }
    }
  }
  return std::nullopt;
}

bool names_a_python_interpreter(const std::string& word) {
  static const std::regex python(R"((^|.*/)python[0-9.]*$)");
  return std::regex_match(word, python);
}

std::vector<std::string> launcher_flags_among(const std::vector<std::string>& script_args) {
  // torchrun's own flags; generic names a script may well take itself
  // (--verbose, --log-dir, --role, --module, -r, -t ...) are left out.
  static const std::set<std::string> distinctive = [] {
    std::set<std::string> names;
    for (std::string name :
         {"standalone", "nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port",
          "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "max-restarts",
          "monitor-interval", "start-method", "no-python", "run-path", "local-addr",
          "local-ranks-filter", "redirects", "tee", "hang-timeout", "section-timeouts", "metrics-port",
          "numa-binding", "virtual-local-rank", "signals-to-handle", "shutdown-timeout",
          "stop-timeout", "log-line-prefix-template"}) {
      names.insert("--" + name);
      std::replace(name.begin(), name.end(), '-', '_');
      names.insert("--" + name);
    }
    return names;
  }();
  std::vector<std::string> found;
  for (const auto& arg : script_args) {
    std::string name = arg.substr(0, arg.find('='));
    if (distinctive.count(name) > 0 &&
        std::find(found.begin(), found.end(), name) == found.end()) {
      found.push_back(name);
    }
  }
  return found;
}

}  // namespace dtrun::launcher
