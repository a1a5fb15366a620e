// The processes of dtrun --hosts (launcher/ssh/ssh_fanout.h): the pipes to and
// from each ssh, and how an ssh is started (its own process group, the
// default signal dispositions back, no pipe of another host).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dtrun::launcher {

struct ssh_pipe {
  int read = -1;
  int write = -1;
};

// A pipe whose ends are close-on-exec. Throws std::runtime_error.
ssh_pipe make_ssh_pipe();

// An ssh started, or the errno of a failed spawn (ENOENT: not found).
struct spawned_ssh {
  pid_t pid = -1;
  int error = 0;
};

// Starts `argv` (from PATH) with the given stdio in a process group of its
// own.
spawned_ssh spawn_ssh(const std::vector<std::string>& argv, int in, int out, int err);

// The disposition this dtrun was started with (read before a signal_set
// installs its handler) is SIG_IGN.
bool ignored_at_start(int sig);

}  // namespace dtrun::launcher
