#include "agent/spec/log_spec.h"

#include <string_view>

#include <unistd.h>

#include <fmt/format.h>

#include "agent/spec/template_substitute.h"

namespace dtrun::agent {
namespace {

std::optional<std::string> field_value(std::string_view name, const prefix_fields& f) {
  if (name == "role_name") return f.role_name;
  if (name == "rank") return std::to_string(f.rank);
  if (name == "local_rank") return std::to_string(f.local_rank);
  if (name == "group_rank") return std::to_string(f.group_rank);
  if (name == "restart_count") return std::to_string(f.restart_count);
  if (name == "hostname") return f.hostname;
  return std::nullopt;
}

}  // namespace

unsigned std_setting::for_rank(int local_rank) const {
  if (!is_map) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? std_none : it->second;
}

const char* route_name(stream_route route) {
  switch (route) {
    case stream_route::console: return "console";
    case stream_route::discard: return "discard";
    case stream_route::file: return "file";
    case stream_route::file_and_console: return "file+console";
    case stream_route::prefixed_console: return "console+prefix";
    case stream_route::watched_console: return "console (watched)";
  }
  return "console";
}

// torchrun's DefaultLogsSpecs.reify: a tee'd stream is also redirected
// (torchrun tees by tailing the file); a rank outside the filter keeps its
// files but loses the console. Unlike torchrun, whose filter only applies to
// tee'd streams, a shown rank's plain console stream is prefixed too: once
// the console shows a subset of ranks, each line should say whose it is.
worker_routes log_spec::routes(int local_rank) const {
  unsigned tee_streams = tee.for_rank(local_rank);
  unsigned redirected = redirects.for_rank(local_rank) | tee_streams;
  bool shown = !local_ranks_filter || local_ranks_filter->count(local_rank) > 0;
  auto route = [&](unsigned stream) {
    if ((tee_streams & stream) != 0) {
      return shown ? stream_route::file_and_console : stream_route::file;
    }
    if ((redirected & stream) != 0) return stream_route::file;
    if (!shown) return stream_route::discard;
    if (local_ranks_filter || prefix_console) return stream_route::prefixed_console;
    return watch_console ? stream_route::watched_console : stream_route::console;
  };
  return {route(std_out), route(std_err)};
}

bool log_spec::writes_files(int local_world_size) const {
  for (int r = 0; r < local_world_size; ++r) {
    if ((redirects.for_rank(r) | tee.for_rank(r)) != std_none) return true;
  }
  return false;
}

std::string this_host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string line_prefix(const std::string& prefix_template, const prefix_fields& fields) {
  if (prefix_template.empty()) return fmt::format("[{}{}]:", fields.role_name, fields.local_rank);
  return safe_substitute(prefix_template, [&fields](std::string_view name) {
    return field_value(name, fields);
  });
}

}  // namespace dtrun::agent
