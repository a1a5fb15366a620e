#include "launcher/config/log_options.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "agent/output/line_filter.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/trim.h"

namespace dtrun::launcher {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    std::size_t at = text.find(separator, start);
    parts.emplace_back(trim(std::string_view(text).substr(start, at - start)));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// A local rank: digits only, at most six of them.
std::optional<int> parse_rank(const std::string& text) {
  auto rank = parse_whole<unsigned>(text);
  if (!rank || text.size() > 6) return std::nullopt;
  return static_cast<int>(*rank);
}

std::optional<unsigned> parse_streams(const std::string& text) {
  if (text.size() != 1 || text[0] < '0' || text[0] > '3') return std::nullopt;
  return static_cast<unsigned>(text[0] - '0');
}

void warn_beyond(const std::string& what, int local_rank, int nproc_per_node,
                 std::vector<std::string>& warnings) {
  if (local_rank < nproc_per_node) return;
  warnings.push_back(fmt::format(
      "{} names local rank {}, but this node runs {} worker(s) (local ranks 0..{}); ignored", what,
      local_rank, nproc_per_node, nproc_per_node - 1));
}

nlohmann::json setting_json(const agent::std_setting& setting) {
  if (!setting.is_map) return setting.all;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [rank, streams] : setting.per_rank) map[std::to_string(rank)] = streams;
  return map;
}

}  // namespace

agent::std_setting parse_std_setting(const std::string& flag, const std::string& text) {
  agent::std_setting setting;
  std::string value(trim(text));
  if (auto streams = parse_streams(value)) {
    setting.all = *streams;
    return setting;
  }
  if (value.find(':') == std::string::npos) {
    throw usage_error(fmt::format(
        "{}={} is not 0, 1, 2 or 3 (none, stdout, stderr, both) or a per-rank map like {}=0:3,1:2",
        flag, text, flag));
  }
  setting.is_map = true;
  for (const auto& item : split(value, ',')) {
    auto colon = item.find(':');
    std::optional<int> rank;
    std::optional<unsigned> streams;
    if (colon != std::string::npos) {
      rank = parse_rank(std::string(trim(item.substr(0, colon))));
      streams = parse_streams(std::string(trim(item.substr(colon + 1))));
    }
    if (!rank || !streams) {
      throw usage_error(fmt::format(
          "{}={}: '{}' is not LOCAL_RANK:VALUE with VALUE 0, 1, 2 or 3 (e.g. {}=0:3,1:2)", flag,
          text, item, flag));
    }
    if (!setting.per_rank.emplace(*rank, *streams).second) {
      throw usage_error(fmt::format("{}={} names local rank {} twice", flag, text, *rank));
    }
  }
  return setting;
}

std::optional<std::set<int>> parse_local_ranks_filter(const std::string& text) {
  if (trim(text).empty()) return std::nullopt;
  std::set<int> ranks;
  for (const auto& item : split(text, ',')) {
    auto rank = parse_rank(item);
    if (!rank) {
      throw usage_error(fmt::format(
          "--local-ranks-filter={}: '{}' is not a local rank; give a comma-separated list like "
          "--local-ranks-filter=0,1",
          text, item));
    }
    ranks.insert(*rank);
  }
  return ranks;
}

agent::log_spec resolve_log_spec(const launch_options& options, int nproc_per_node,
                                 const env_map& env, std::vector<std::string>& warnings) {
  agent::log_spec spec;
  spec.redirects = parse_std_setting("--redirects", options.redirects);
  spec.tee = parse_std_setting("--tee", options.tee);
  spec.local_ranks_filter = parse_local_ranks_filter(options.local_ranks_filter);
  for (const auto& [flag, setting] :
       {std::pair{"--redirects", &spec.redirects}, std::pair{"--tee", &spec.tee}}) {
    for (const auto& entry : setting->per_rank) {
      warn_beyond(flag, entry.first, nproc_per_node, warnings);
    }
  }
  if (spec.local_ranks_filter) {
    for (int rank : *spec.local_ranks_filter) {
      warn_beyond("--local-ranks-filter", rank, nproc_per_node, warnings);
    }
  }
  // As torchrun 2.14: the flag (or PET_LOG_LINE_PREFIX_TEMPLATE) when not
  // empty, else the variable.
  spec.line_prefix_template = options.log_line_prefix_template;
  auto prefix = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  if (spec.line_prefix_template.empty() && prefix != env.end()) {
    spec.line_prefix_template = prefix->second;
  }
  // --prefix-console (dtrun --hosts' agents): the launching dtrun adds the
  // host; the global rank says the rest.
  if (options.prefix_console) {
    spec.prefix_console = true;
    if (spec.line_prefix_template.empty()) spec.line_prefix_template = "[rank$rank]:";
  }
  spec.duplicate_stdout_filters = agent::parse_duplicate_filters(options.duplicate_stdout_filters);
  spec.duplicate_stderr_filters = agent::parse_duplicate_filters(options.duplicate_stderr_filters);
  // As torchrun, only tee'd streams of shown ranks are filtered; say so
  // when that leaves the file empty whatever the workers print.
  for (const auto& [flag, filters, stream] :
       {std::tuple{"--duplicate-stdout-filters", &spec.duplicate_stdout_filters, agent::std_out},
        std::tuple{"--duplicate-stderr-filters", &spec.duplicate_stderr_filters,
                   agent::std_err}}) {
    if (filters->empty()) continue;
    bool any = false;
    for (int rank = 0; rank < nproc_per_node; ++rank) {
      agent::worker_routes routes = spec.routes(rank);
      any = any || (stream == agent::std_out ? routes.out : routes.err) ==
                       agent::stream_route::file_and_console;
    }
    if (!any) {
      warnings.push_back(fmt::format(
          "{} copies lines of tee'd streams only, and no local rank shown on the console tees "
          "its {}; add --tee={} (or 3)",
          flag, stream == agent::std_out ? "stdout" : "stderr",
          stream == agent::std_out ? 1 : 2));
    }
  }
  return spec;
}

nlohmann::json to_json(const agent::log_spec& spec, int nproc_per_node) {
  nlohmann::json workers = nlohmann::json::array();
  for (int local_rank = 0; local_rank < nproc_per_node; ++local_rank) {
    agent::worker_routes routes = spec.routes(local_rank);
    workers.push_back({{"local_rank", local_rank},
                       {"stdout", agent::route_name(routes.out)},
                       {"stderr", agent::route_name(routes.err)}});
  }
  nlohmann::json filter = nullptr;
  if (spec.local_ranks_filter) {
    filter = nlohmann::json::array();
    for (int rank : *spec.local_ranks_filter) filter.push_back(rank);
  }
  return {
      {"duplicate_stdout_filters", spec.duplicate_stdout_filters},
      {"duplicate_stderr_filters", spec.duplicate_stderr_filters},
      {"redirects", setting_json(spec.redirects)},
      {"tee", setting_json(spec.tee)},
      {"local_ranks_filter", filter},
      {"line_prefix_template", spec.line_prefix_template.empty()
                                   ? std::string("[${role_name}${local_rank}]:")
                                   : spec.line_prefix_template},
      {"prefix_console", spec.prefix_console},
      {"files", "<log_dir>/<run_id>_<random>/attempt_<restart>/<local_rank>/{stdout,stderr}.log"},
      {"workers", workers},
  };
}

}  // namespace dtrun::launcher
