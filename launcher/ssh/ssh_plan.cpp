#include "launcher/ssh/ssh_plan.h"

#include <fmt/format.h>

#include "launcher/config/launch_config.h"
#include "launcher/config/rendezvous_config.h"
#include "launcher/ssh/remote_command.h"

namespace dtrun::launcher {
namespace {

bool conf_names_is_host(const std::string& conf) {
  for (const auto& [key, value] : parse_rdzv_conf(conf)) {
    if (key == "is_host") return true;
  }
  return false;
}

// "a:b" IPv6 addresses go in brackets in an endpoint.
std::string endpoint_host(const std::string& address) {
  return address.find(':') == std::string::npos ? address : "[" + address + "]";
}

}  // namespace

ssh_launch_settings resolve_ssh_settings(const launch_options& o,
                                         const std::map<std::string, std::string>& env,
                                         const std::string& self, const std::string& workdir,
                                         const std::string& run_id) {
  bool hosts_given = !o.hosts.value.empty() || o.hosts.given();
  bool hostfile_given = !o.hostfile.value.empty() || o.hostfile.given();
  if (hosts_given && hostfile_given) {
    throw usage_error("--hosts and --hostfile: give one of them");
  }
  ssh_launch_settings s;
  s.hosts = hostfile_given ? read_hostfile(o.hostfile.value) : parse_hosts_flag(o.hosts.value);
  if (o.standalone) {
    throw usage_error("--standalone runs on this machine only; drop it to launch on --hosts");
  }
  if (o.nnodes.given()) {
    node_range range = o.nnodes.value.range();
    int count = static_cast<int>(s.hosts.size());
    if (range.min != count || range.max != count) {
      throw usage_error(fmt::format(
          "--nnodes={} does not match the {} host(s) listed; drop --nnodes (one node per host)",
          o.nnodes.value.text(), count));
    }
  }
  if (o.rdzv_backend.given_or_derived() && o.rdzv_backend.value != "c10d") {
    throw usage_error(fmt::format(
        "--rdzv-backend={}: a launch over ssh meets through c10d; drop --rdzv-backend",
        o.rdzv_backend.value));
  }
  if (o.rdzv_endpoint.value.empty() && conf_names_is_host(o.rdzv_conf)) {
    throw usage_error(
        "--rdzv-conf is_host: with --hosts the first host hosts the store; drop is_host (or "
        "give --rdzv-endpoint too)");
  }
  if (!o.ssh.empty()) s.ssh_words = split_ssh_command(o.ssh);
  const auto exports = parse_export_list(o.export_vars);
  s.env = select_exports(env, exports);
  for (const auto& name : exports) {
    if (name.find('=') == std::string::npos && env.count(name) == 0) {
      s.warnings.push_back(fmt::format(
          "--export {}: not set here, so the hosts do not get it; export it first or write "
          "--export {}=VALUE",
          name, name));
    }
  }
  s.remote_dtrun = o.remote_dtrun.empty() ? self : o.remote_dtrun;
  s.workdir = workdir;
  s.run_id = o.rdzv_id.value != "none" && !o.rdzv_id.value.empty() ? o.rdzv_id.value : run_id;
  return s;
}

std::vector<host_launch> plan_ssh_launch(const launch_options& o, const ssh_launch_settings& s) {
  std::vector<host_launch> plan;
  const bool own_endpoint = o.rdzv_endpoint.value.empty();
  for (std::size_t i = 0; i < s.hosts.size(); ++i) {
    const host_entry& host = s.hosts[i];
    std::vector<std::string> argv = {s.remote_dtrun};
    argv.insert(argv.end(), o.remote_args.begin(), o.remote_args.end());
    // After the user's flags: the last one wins.
    argv.push_back(fmt::format("--nnodes={}", s.hosts.size()));
    argv.push_back("--rdzv-backend=c10d");
    argv.push_back(fmt::format("--rdzv-id={}", s.run_id));
    port_role port = port_role::none;
    if (own_endpoint) {
      port = i == 0 ? port_role::report : port_role::read;
      argv.push_back(fmt::format("--rdzv-endpoint={}:0", endpoint_host(s.hosts[0].address())));
      std::string conf = o.rdzv_conf;
      conf += conf.empty() ? "" : ",";
      conf += i == 0 ? "is_host=1" : "is_host=0";
      argv.push_back(fmt::format("--rdzv-conf={}", conf));
      argv.push_back(i == 0 ? "--rdzv-port-via-stdio=report" : "--rdzv-port-via-stdio=read");
    } else {
      argv.push_back(fmt::format("--rdzv-endpoint={}", o.rdzv_endpoint.value));
    }
    if (host.slots) argv.push_back(fmt::format("--nproc-per-node={}", *host.slots));
    argv.push_back("--stop-on-stdin-eof");
    argv.push_back("--prefix-console");
    argv.push_back("--");
    argv.push_back(o.script);
    argv.insert(argv.end(), o.script_args.begin(), o.script_args.end());
    plan.push_back({host, ssh_argv(s.ssh_words, host.target,
                                   remote_shell_command(s.workdir, s.env, argv)),
                    port});
  }
  return plan;
}

}  // namespace dtrun::launcher
