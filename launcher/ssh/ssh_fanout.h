// dtrun --hosts at run time (docs/ssh.md): one ssh per host, all on one
// Boost.Asio event loop; their output on this terminal, each line
// prefixed with its host; signals forwarded; one exit code and one failure
// summary for the job.
//
// Each ssh runs in its own process group (Ctrl-C reaches this dtrun only,
// which decides) with its stdin a pipe from this dtrun for the whole run:
// the remote agent reads forwarded signals from it, the first host's
// rendezvous port reaches the others through it, and its end-of-file (this
// dtrun died, or the connection dropped) makes the remote agent stop its
// workers by itself.
//
// Connections are set up at most max_connecting at a time (--ssh-fanout):
// the next ssh starts when one of them has started its remote agent (its
// agent_started_line) or ended. A live connection holds no slot, so every
// host joins the rendezvous however many there are; only the set-up (ssh's
// handshake, the remote login) is bounded, which is where a few hundred at
// once overrun process limits and sshd's MaxStartups.
//
// Exit code: 128+s after signal s; else the root cause's code from the
// failure summary; else the code of the first host whose ssh or agent
// failed without a summary (255: ssh could not connect); else 0.
#pragma once

#include <chrono>
#include <vector>

#include "launcher/ssh/ssh_plan.h"

namespace dtrun::launcher {

struct fanout_options {
  std::vector<host_launch> plan;
  // How many connections are being set up at once, at most (>= 1).
  std::size_t max_connecting = 64;
  // How long a host may take from its ssh's start to its agent's start
  // line before the launch fails (the rendezvous's join timeout: a host
  // not started by then could not join anyway).
  std::chrono::milliseconds setup_timeout{600000};
  // The agents' own grace period: the remote agents SIGKILL their workers
  // this long after a stop; a connection still open `teardown_margin`
  // later is closed from here (ssh killed).
  std::chrono::milliseconds stop_timeout{30000};
  std::chrono::milliseconds teardown_margin{15000};
  // Signals forwarded to the hosts (SIGINT, SIGTERM, SIGHUP and SIGQUIT
  // stop the job; SIGUSR1/2 are only passed on).
  std::vector<int> signals;
  std::string remote_dtrun;  // named when the remote shell cannot find it
  bool quiet = false;        // --quiet: no progress lines of our own
};

// Runs the job to its end and returns dtrun's exit code.
int run_ssh_fanout(const fanout_options& options);

}  // namespace dtrun::launcher
