// Where agents put their control sockets (`dtrun status` finds them
// there): $XDG_RUNTIME_DIR/dtrun when that is set and usable, else
// /tmp/dtrun-<uid>. Either directory must be ours, a real directory and
// writable by nobody else: a socket in a directory another user controls
// could be swapped for theirs.
#pragma once

#include <vector>

#include <sys/types.h>

#include <optional>
#include <string>

namespace dtrun::agent {

struct control_dir_result {
  std::optional<std::string> path;  // the directory, when usable
  std::string why;                  // when not: one line saying why
};

// Finds (and with `create`, makes, mode 0700) the control directory for
// `uid`. `xdg_runtime_dir` is $XDG_RUNTIME_DIR (nullopt or empty when
// unset); `tmp` is where the fallback goes (/tmp, a temporary directory in
// tests). Never throws.
control_dir_result find_control_dir(const std::optional<std::string>& xdg_runtime_dir,
                                    bool create, uid_t uid, const std::string& tmp = "/tmp");

// The same for this process: $DTRUN_CONTROL_DIR when set (that folder
// only: isolated setups and tests), else from $XDG_RUNTIME_DIR and
// getuid().
control_dir_result find_control_dir(bool create);

// Every folder a client should look in for this process's user: the
// $DTRUN_CONTROL_DIR override alone, else both $XDG_RUNTIME_DIR/dtrun and
// /tmp/dtrun-<uid> (an agent started without XDG_RUNTIME_DIR, e.g. by a
// batch system, is found from a login shell that has it). Only usable ones.
std::vector<std::string> control_dirs_to_search();

// Why `path` may not hold our sockets (nullopt when it may): not a
// directory (a symbolic link is not followed), owned by another user, or
// writable by group or others.
std::optional<std::string> unsafe_dir_reason(const std::string& path, uid_t uid);

}  // namespace dtrun::agent
