// The command lines of an ssh launch (dtrun --hosts, docs/ssh.md), built
// as plain strings so their quoting is unit-tested without ssh.
//
// ssh hands the remote side one string for the user's login shell, so
// every word dtrun puts in it is single-quoted for a POSIX shell:
//
//   cd -- '/work/dir' && exec env -- 'NCCL_DEBUG=INFO' '/opt/dtrun' '--nnodes=2' ...
//
// `exec`, so the remote dtrun is the process ssh's channel talks to: its
// stdin is the pipe from the launching dtrun (see agent/process/stdin_watch.h).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrun::launcher {

// `text` as one word for a POSIX shell: '...' with each ' written '\''.
std::string shell_quote(std::string_view text);

// The words joined with spaces, each quoted only when it needs it (for
// --dry-run and error messages: what a user can paste). A word holding a
// control character (a newline, an escape sequence) is written $'...'
// with the character escaped, so the output is one line per command and
// cannot drive the terminal.
std::string shell_join(const std::vector<std::string>& words);

// --ssh's value split into words as a POSIX shell would split it: blanks
// separate, '...' and "..." group, \ escapes outside single quotes. Throws
// usage_error naming --ssh for an unterminated quote or an empty command.
std::vector<std::string> split_ssh_command(std::string_view text);

// The variables named by default (docs/ssh.md): every variable whose name
// starts with one of these prefixes...
inline const std::vector<std::string> default_export_prefixes = {
    "PET_", "TORCH", "NCCL", "PYTHON", "MLFLOW", "MV2", "UCX", "GLOO", "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS"};

// --export's value: "VAR,VAR=value,...". Names must be shell identifiers.
// Throws usage_error naming --export.
std::vector<std::string> parse_export_list(std::string_view text);

// What reaches the remote workers: the variables of `env` whose names start
// with a default prefix, then each --export item ("VAR" copies VAR from
// `env` when set; "VAR=value" sets it), later ones winning. Sorted by name.
std::vector<std::pair<std::string, std::string>> select_exports(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& exports);

// The string the remote shell runs: cd to `workdir`, then exec the
// remote argv (argv[0] is the remote dtrun) with `env` added.
std::string remote_shell_command(const std::string& workdir,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 const std::vector<std::string>& argv);

// ssh's argv: the --ssh words (default: "ssh"), dtrun's fixed options
// (BatchMode: no prompt can be answered through our pipe), the target and
// the remote command.
std::vector<std::string> ssh_argv(const std::vector<std::string>& ssh_words,
                                  const std::string& target, const std::string& remote_command);

}  // namespace dtrun::launcher
