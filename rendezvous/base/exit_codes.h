// dtrun's own exit codes, the way shells and tini report them (the
// agent's exit_status.h decodes a worker's: 128+n for signal n).
#pragma once

namespace dtrun {

inline constexpr int exit_usage = 2;            // a command line dtrun cannot run
inline constexpr int exit_not_executable = 126;  // the program exists but cannot be executed
inline constexpr int exit_not_found = 127;       // the program was not found

}  // namespace dtrun
