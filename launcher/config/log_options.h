// --redirects, --tee and --local-ranks-filter as torchrun reads them, into
// an agent::log_spec; plus the line prefix template from
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/spec/log_spec.h"
#include "launcher/cli/launch_options.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// "0".."3" (none, stdout, stderr, both) for every local rank, or a map
// "LOCAL_RANK:VALUE,..." ("0:3,1:0,12:2"; ranks not named get 0). Unlike
// torchrun, ranks may have several digits. `flag` names the option in
// errors ("--tee"). Throws usage_error.
agent::std_setting parse_std_setting(const std::string& flag, const std::string& text);

// "0,2,5": the local ranks whose output stays on the console; "" means
// all of them (nullopt). Throws usage_error.
std::optional<std::set<int>> parse_local_ranks_filter(const std::string& text);

// The log flags of `options` for `nproc_per_node` workers; the prefix
// template comes from `env`. Local ranks named beyond nproc_per_node are
// ignored with a warning appended to `warnings` (with --nproc-per-node=auto
// the same command line may serve nodes of different sizes). Throws
// usage_error.
agent::log_spec resolve_log_spec(const launch_options& options, int nproc_per_node,
                                 const env_map& env, std::vector<std::string>& warnings);

// For --dry-run: the flags as resolved and each local rank's routes.
nlohmann::json to_json(const agent::log_spec& spec, int nproc_per_node);

}  // namespace dtrun::launcher
