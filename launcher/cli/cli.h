// dtrun's command line: torchrun's flags in both spellings (--nproc-per-node
// and --nproc_per_node), each also read from PET_<FLAG> in the environment
// (the command line wins), plus dtrun's own (--python, --dry-run).
//
// Everything from the training script on belongs to the script and is
// passed to it untouched; a lone "--" may separate dtrun's flags from the
// script.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/launch_options.h"
#include "rendezvous/base/usage_error.h"

namespace dtrun::launcher {

struct parse_result {
  launch_options options;
  // --help or --version was given: print help_text, exit 0.
  bool help = false;
  std::string help_text;
};

// The one line dtrun answers torchrun's --print-completion with (exit 2);
// docs/compatibility.md quotes it and tests/e2e/test_torchrun_flags.py
// reads it from there.
inline constexpr const char* print_completion_refusal =
    "--print-completion: dtrun prints no completion script; its packages install its bash and "
    "zsh completions (share/bash-completion/completions/dtrun, "
    "share/zsh/vendor-completions/_dtrun)";

// Parses args (without argv[0]). Reads PET_*, DTRUN_PYTHON and
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT from the process environment. Throws
// usage_error.
parse_result parse_command_line(const std::vector<std::string>& args);

}  // namespace dtrun::launcher
