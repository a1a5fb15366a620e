// What the workers will run, found once before any worker starts: the
// program (the Python interpreter, or --no-python's program) on PATH, and
// the script file a Python worker is given. A missing one is one line and
// exit 127 here instead of one failing worker per rank; --dry-run shows
// the full path that will run and what chose it.
#pragma once

#include <optional>
#include <string>

#include "launcher/config/launch_config.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// Why the launch cannot start its workers: the exit code (127 not found,
// 126 not executable) and one line naming what was looked up and where.
struct program_problem {
  int exit_code = 127;
  std::string message;
};

// How the interpreter was chosen, for messages: "--python",
// "DTRUN_PYTHON", "PYTHON_EXEC", "the Python environment dtrun is
// installed in" or "python3 on PATH".
std::string interpreter_choice(const launch_config& config);

// Finds config.program on the workers' PATH (from `env`) and sets
// config.program_path to its absolute path; for a Python script that is a
// file path (not -m, no ${local_rank} in it), checks that the file exists.
// Returns what is wrong, or nullopt.
std::optional<program_problem> find_program(launch_config& config, const env_map& env);

// "the workers ran /usr/bin/python3 (python3 on PATH)": for failure hints.
std::string describe_interpreter(const launch_config& config);

}  // namespace dtrun::launcher
