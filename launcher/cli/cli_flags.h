// dtrun's flags, defined on the CLI11 app that parse_command_line
// (launcher/cli/cli.h) parses with: each flag's names (torchrun's two
// spellings), its PET_<FLAG> variable, its check, its help and its group.
#pragma once

#include <CLI/CLI.hpp>

#include "launcher/cli/launch_options.h"
#include "rendezvous/base/number_checks.h"

namespace dtrun::launcher {

// 0 is meaningful: SIGKILL right after the stop signal, as torchrun.
inline constexpr duration_limits stop_timeout_limits{true, max_duration_s};

// Defines every flag on `app`, bound to the fields of `o`, in --help's order.
void define_flags(CLI::App& app, launch_options& o);

}  // namespace dtrun::launcher
