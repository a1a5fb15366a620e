// What dtrun --hosts runs on each host (docs/ssh.md): one ssh command line
// per host, decided before anything starts, so --dry-run prints exactly
// what would run and unit tests check it without ssh.
//
// Each host runs the same dtrun (same absolute path, or --remote-dtrun) in
// the same working directory with the user's flags, plus what makes the
// hosts one job: --nnodes=<hosts>, a c10d rendezvous (node ranks assigned
// by it), that host's slots as --nproc-per-node, and the internal flags of
// an agent started over ssh (--stop-on-stdin-eof, --prefix-console).
//
// The rendezvous store: on the first host, on a port its agent picks (no
// port is guessed, so none is taken by chance): it binds port 0 and
// reports the port on stdout (--rdzv-port-via-stdio=report); the other
// hosts' agents read it from their stdin (=read), where the launching
// dtrun writes it. With --rdzv-endpoint the user's endpoint is used as is.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/cli/launch_options.h"
#include "launcher/ssh/host_list.h"

namespace dtrun::launcher {

// The first line of the first host's stdout: the store's port.
inline constexpr const char* rdzv_port_line_prefix = "dtrun-ssh: rendezvous port ";

// The line every remote agent (--stop-on-stdin-eof) writes on its stdout
// as soon as it runs: the connection is set up, the launching dtrun may
// start the next one (fanout_options::max_connecting).
inline constexpr const char* agent_started_line = "dtrun-ssh: agent started";

enum class port_role { none, report, read };

struct host_launch {
  host_entry host;
  std::vector<std::string> ssh_argv;
  port_role port = port_role::none;
};

struct ssh_launch_settings {
  std::vector<host_entry> hosts;
  std::vector<std::string> ssh_words = {"ssh"};
  std::vector<std::pair<std::string, std::string>> env;  // exported
  std::string remote_dtrun;
  std::string workdir;
  std::string run_id;
  // One line each, said before the launch: --export names that are not set
  // here (nothing is sent for them).
  std::vector<std::string> warnings;
};

// The hosts and settings from --hosts/--hostfile, --ssh, --export and
// --remote-dtrun. `self` is this dtrun's absolute path, `workdir` the
// current directory, `env` this process's environment, `run_id` the one to
// use when --rdzv-id is not given. Throws usage_error for flags that
// contradict a launch over ssh (--standalone, a --nnodes other than the
// host count, --rdzv-backend=static, is_host in --rdzv-conf).
ssh_launch_settings resolve_ssh_settings(const launch_options& options,
                                         const std::map<std::string, std::string>& env,
                                         const std::string& self, const std::string& workdir,
                                         const std::string& run_id);

// Whether the command line asks for a launch over ssh (--hosts or
// --hostfile given, even empty).
inline bool wants_ssh_launch(const launch_options& o) {
  return o.hosts.given() || o.hostfile.given();
}

// One ssh command line per host, in host order.
std::vector<host_launch> plan_ssh_launch(const launch_options& options,
                                         const ssh_launch_settings& settings);

}  // namespace dtrun::launcher
