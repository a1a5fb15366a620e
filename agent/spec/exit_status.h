// Exit codes the way shells and tini report them, so dtrun's own exit code
// says what happened to the worker that ended the run:
//   0..255  the worker's exit code
//   128+n   the worker was killed by signal n
//   126     the program exists but could not be executed
//   127     the program was not found
#pragma once

#include <string>

#include "rendezvous/base/exit_codes.h"

namespace dtrun::agent {

// A finished process, decoded from a waitpid() status.
struct exit_status {
  int code = 0;     // shell-style code (128+n for signals)
  int signal = 0;   // the signal that killed it, 0 when it exited

  bool ok() const { return code == 0; }
};

// Decodes a waitpid() status word.
exit_status decode_wait_status(int status);

// "SIGTERM" for 15; "signal 42" for numbers without a name.
std::string signal_name(int signal);

// Parses "SIGTERM", "TERM" or "15" (case-insensitive). Returns 0 when the
// text names no signal.
int parse_signal(const std::string& text);

// "exited with code 3" / "was killed by signal 9 (SIGKILL)".
std::string describe(const exit_status& status);

// The exit code for an exec() failure: 127 for ENOENT/ENOTDIR, else 126.
int exec_failure_code(int error_number);

}  // namespace dtrun::agent
