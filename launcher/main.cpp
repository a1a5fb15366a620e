// dtrun: parse, resolve, then hand the run to the agent. Exit codes:
// 0 success, 2 usage errors, 126/127 program not executable / not found,
// the failing worker's code, 128+n after signal n (see docs/agent.md).
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "agent/policy/elastic_agent.h"
#include "agent/process/worker_process.h"
#include "agent/report/agent_log.h"
#include "agent/spec/exit_status.h"
#include "launcher/cli/cli.h"
#include "launcher/config/installed_python.h"
#include "launcher/config/launch_config.h"
#include "launcher/config/program_lookup.h"
#include "launcher/config/rendezvous_config.h"
#include "launcher/config/resolve_launch_config.h"
#include "launcher/report/report_command.h"
#include "launcher/schedulers/scheduler_detect.h"
#include "launcher/schedulers/scheduler_env.h"
#include "launcher/ssh/remote_command.h"
#include "launcher/ssh/ssh_fanout.h"
#include "launcher/ssh/ssh_plan.h"
#include "launcher/status/status_command.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/standalone_rendezvous.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/base/exit_codes.h"
#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/etcd/etcd_round_store.h"
#include "rendezvous/etcd/etcd_session.h"

namespace {

using namespace dtrun;

int fail(int code, const std::string& message) {
  fmt::print(stderr, "dtrun: error: {}\n", printable(message));  // may quote a peer or the store
  return code;
}

// dtrun --hosts / --hostfile: one agent per host over ssh (docs/ssh.md).
int launch_over_ssh(const launcher::launch_options& options, const env_map& env) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return fail(1, fmt::format("cannot find this dtrun's own path: {}", ec.message()));
  auto workdir = std::filesystem::current_path(ec);
  if (ec) return fail(1, fmt::format("cannot read the current directory: {}", ec.message()));
  auto settings = launcher::resolve_ssh_settings(options, env, self.string(), workdir.string(),
                                                 launcher::random_run_id());
  if (!options.quiet) {
    for (const auto& warning : settings.warnings) {
      fmt::print(stderr, "dtrun: warning: {}\n", printable(warning));
    }
  }
  auto plan = launcher::plan_ssh_launch(options, settings);
  if (options.dry_run) {
    for (const auto& host : plan) fmt::print("{}\n", launcher::shell_join(host.ssh_argv));
    return 0;
  }
  launcher::fanout_options fanout;
  fanout.plan = std::move(plan);
  fanout.stop_timeout = seconds_to_duration(options.stop_timeout, "--stop-timeout",
                                                      {true, max_duration_s});
  fanout.signals = launcher::parse_signals(options.signals_to_handle);
  // --preempt-notice SIGUSR1/SIGUSR2: caught here too and passed on to
  // every host's agent, as a notice (not a stop) is.
  if (int notice = agent::parse_signal(options.preempt_notice);
      notice == SIGUSR1 || notice == SIGUSR2) {
    fanout.signals.push_back(notice);
  }
  fanout.remote_dtrun = settings.remote_dtrun;
  fanout.quiet = options.quiet;
  fanout.max_connecting = static_cast<std::size_t>(options.ssh_fanout);
  fanout.setup_timeout = launcher::rdzv_join_timeout(launcher::parse_rdzv_conf(options.rdzv_conf));
  return launcher::run_ssh_fanout(fanout);
}

// --rdzv-port-via-stdio=read: the first line of stdin is the rendezvous
// port, written by the launching dtrun once the first host reported it.
// Read byte by byte, so nothing after the line (forwarded signals) is
// taken from the agent. A blocking read: nothing else runs yet.
std::optional<std::uint16_t> read_port_line() {
  std::string line;
  char c = 0;
  while (line.size() < 16) {
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;  // the launcher stopped us before the rendezvous
    if (c == '\n') break;
    line += c;
  }
  return static_cast<std::uint16_t>(
      parse_integer(line, "the rendezvous port from stdin", 1, max_port));
}

// --rdzv-port-via-stdio=report: the store is bound (port 0: a free one);
// the launching dtrun passes its port on to the other hosts.
void report_rdzv_port(const rendezvous::rendezvous_handler& handler) {
  const auto* dynamic = dynamic_cast<const rendezvous::dynamic_rendezvous*>(&handler);
  if (dynamic == nullptr || dynamic->store_port() == 0) {
    throw usage_error(
        "--rdzv-port-via-stdio=report needs a c10d rendezvous hosted here (is_host=1)");
  }
  fmt::print("{}{}\n", launcher::rdzv_port_line_prefix, dynamic->store_port());
  std::fflush(stdout);
}

int launch(const launcher::launch_config& config, const launcher::launch_options& o) {
  // --quiet silences warnings and the rendezvous' progress; errors stay.
  agent::agent_log messages(config.agent.report.level);
  for (const auto& warning : config.warnings) messages.info(fmt::format("warning: {}", warning));

  boost::asio::io_context io(1);
  std::unique_ptr<rendezvous::rendezvous_handler> rendezvous;
  if (config.multi_node() != nullptr) {
    // The plan's settings with the job's run id and restart budget, which
    // the agent's options hold (launch_config.h).
    auto rdzv_options = launcher::rendezvous_options(config);
    if (!rdzv_options.log) {
      rdzv_options.log = [messages](const std::string& line) { messages.info(line); };
    }
    std::shared_ptr<rendezvous::etcd_session> etcd;
    if (auto etcd_client = launcher::etcd_options(config)) {
      etcd = std::make_shared<rendezvous::etcd_session>(io, *etcd_client,
                                                        rendezvous::make_etcd_tls(*etcd_client));
      rdzv_options.store_factory = rendezvous::etcd_round_store_factory(io, etcd);
    }
    rendezvous = std::make_unique<rendezvous::dynamic_rendezvous>(io, rdzv_options);
  } else {
    const launcher::single_node_config& single = *config.single_node();
    rendezvous = std::make_unique<rendezvous::standalone_rendezvous>(
        io, rendezvous::standalone_rendezvous_options{config.agent.spec.run_id,
                                                      config.nproc_per_node(), single.store_host,
                                                      single.store_port, single.store_access});
  }

  if (o.rdzv_port_via_stdio == "report") report_rdzv_port(*rendezvous);

  // The configuration whole, as --dry-run shows it.
  agent::elastic_agent agent(io, config.agent, *rendezvous);
  return agent.run();
}

}  // namespace

int main(int argc, char** argv) {
  // `dtrun status` and `dtrun stacks` look at running jobs, `dtrun report`
  // at a finished one's event log. Only as the first word: a script of that
  // name runs as `dtrun ./status`.
  if (argc > 1 && std::string_view(argv[1]) == "status") {
    return launcher::run_status_command(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string_view(argv[1]) == "stacks") {
    return launcher::run_stacks_command(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string_view(argv[1]) == "report") {
    return launcher::run_report_command(argc - 1, argv + 1);
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    launcher::parse_result parsed = launcher::parse_command_line(args);
    if (parsed.help) {
      fmt::print("{}", parsed.help_text);
      return 0;
    }
    parsed.options.installed_python = launcher::python_beside_this_program();
    env_map env = agent::current_environment();
    if (launcher::wants_ssh_launch(parsed.options)) {
      return launch_over_ssh(parsed.options, env);
    }
    if (parsed.options.stop_on_stdin_eof && !parsed.options.dry_run) {
      // Started by dtrun --hosts: this connection is set up, the launcher
      // may start the next one (--ssh-fanout). First, before anything
      // that can take time (the rendezvous port, name resolution).
      fmt::print("{}\n", launcher::agent_started_line);
      std::fflush(stdout);
    }
    // The pipeline (docs/design.md): the flags, the scheduler's overrides,
    // one resolve.
    launcher::launch_config config = launcher::resolve_launch_config(
        parsed.options, env, launcher::detect_scheduler_env(parsed.options, env));
    // Found once, before any worker: a missing program or script is one
    // line and exit 127/126, not one failing worker per rank.
    auto program_problem = launcher::find_program(config, env);
    if (program_problem && !parsed.options.dry_run) {
      return fail(program_problem->exit_code, program_problem->message);
    }
    if (parsed.options.rdzv_port_via_stdio == "read" && !parsed.options.dry_run) {
      if (!config.multi_node()) {
        throw usage_error("--rdzv-port-via-stdio=read needs a c10d rendezvous");
      }
      auto port = read_port_line();
      if (!port) return 128 + SIGTERM;  // stopped before it began: nothing to say
      config.multi_node()->rendezvous.endpoint_port = *port;
    }
    if (parsed.options.dry_run) {
      nlohmann::json out = launcher::to_json(config, env);
      const std::string& path = config.agent.program;
      out["program"] = {{"path", path.empty() ? nlohmann::json() : nlohmann::json(path)},
                        {"chosen_by", config.program_is_python ? launcher::interpreter_choice(config)
                                                               : std::string("--no-python")}};
      if (program_problem) out["program"]["problem"] = program_problem->message;
      // An argv that is not UTF-8 shows as U+FFFD instead of throwing.
      fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      return 0;
    }
    for (const auto& line : launcher::describe(config.scheduler)) {
      fmt::print(stderr, "dtrun: {}\n", line);
    }
    return launch(config, parsed.options);
  } catch (const usage_error& e) {
    return fail(exit_usage, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
