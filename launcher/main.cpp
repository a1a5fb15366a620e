// dtrun: parse, resolve, then hand the run to the agent. Exit codes:
// 0 success, 2 usage errors, 126/127 program not executable / not found,
// the failing worker's code, 128+n after signal n (see docs/agent.md).
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "agent/agent_log.h"
#include "agent/elastic_agent.h"
#include "agent/exit_status.h"
#include "agent/worker_process.h"
#include "launcher/cli.h"
#include "launcher/installed_python.h"
#include "launcher/launch_config.h"
#include "launcher/legacy_launch.h"
#include "launcher/scheduler_env.h"
#include "launcher/status_command.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/etcd_round_store.h"
#include "rendezvous/etcd_session.h"
#include "rendezvous/printable.h"
#include "rendezvous/standalone_rendezvous.h"

namespace {

using namespace dtrun;

int fail(int code, const std::string& message) {
  fmt::print(stderr, "dtrun: error: {}\n", printable(message));  // may quote a peer or the store
  return code;
}

int launch(const launcher::launch_config& config, const agent::env_map& env) {
  auto path = env.find("PATH");
  auto program = agent::resolve_program(config.program, path == env.end() ? "" : path->second);
  if (!program) {
    return fail(agent::exit_not_found,
                config.program_is_python
                    ? fmt::format("Python interpreter '{}'{} not found on PATH; pass "
                                  "--python=/path/to/python or set DTRUN_PYTHON",
                                  config.program,
                                  config.python_source.empty()
                                      ? ""
                                      : fmt::format(" (from {})", config.python_source))
                    : fmt::format("program '{}' not found on PATH", config.program));
  }
  // Checked once here, so a missing or non-executable program is one clear
  // line and exit 127/126, not one failing worker per rank.
  if (auto failure = agent::check_program(*program)) return fail(failure->exit_code, failure->error);
  // --quiet silences warnings and the rendezvous' progress; errors stay.
  agent::agent_log messages(config.report.level);
  for (const auto& warning : config.warnings) messages.info(fmt::format("warning: {}", warning));

  boost::asio::io_context io(1);
  std::unique_ptr<rendezvous::rendezvous_handler> rendezvous;
  if (config.multi_node) {
    auto rdzv_options = config.multi_node->rendezvous;
    if (!rdzv_options.log) {
      rdzv_options.log = [messages](const std::string& line) { messages.info(line); };
    }
    std::shared_ptr<rendezvous::etcd_session> etcd;
    if (config.multi_node->etcd) {
      etcd = std::make_shared<rendezvous::etcd_session>(
          io, *config.multi_node->etcd, rendezvous::make_etcd_tls(*config.multi_node->etcd));
      rdzv_options.store_factory = rendezvous::etcd_round_store_factory(io, etcd);
    }
    rendezvous = std::make_unique<rendezvous::dynamic_rendezvous>(io, rdzv_options);
  } else {
    rendezvous = std::make_unique<rendezvous::standalone_rendezvous>(
        io, rendezvous::standalone_rendezvous_options{config.spec.run_id, config.nproc_per_node,
                                                      config.store_host, config.store_port,
                                                      config.store_access});
  }

  agent::agent_options options;
  options.spec = config.spec;
  options.program = *program;
  options.args = config.args;
  options.script_name = config.script;
  options.worker_args = config.worker_args;
  options.worker_cpus = config.worker_cpus;
  options.stop_timeout = config.stop_timeout;
  options.hang_timeout = config.hang_timeout;
  options.stack_hook = config.stack_hook;
  options.metrics_port = config.metrics_port;
  options.metrics_host = config.metrics_host;
  options.signals = config.signals;
  options.log_dir = config.log_dir;
  options.logs = config.logs;
  options.report = config.report;
  agent::elastic_agent agent(io, std::move(options), *rendezvous);
  return agent.run();
}

}  // namespace

int main(int argc, char** argv) {
  // `dtrun status` and `dtrun stacks` look at running jobs. Only as the
  // first word: a script of that name runs as `dtrun ./status`.
  if (argc > 1 && std::string_view(argv[1]) == "status") {
    return launcher::run_status_command(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string_view(argv[1]) == "stacks") {
    return launcher::run_stacks_command(argc - 1, argv + 1);
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    launcher::parse_result parsed = launcher::parse_command_line(args);
    if (parsed.help) {
      fmt::print("{}", parsed.help_text);
      return 0;
    }
    parsed.options.installed_python = launcher::python_beside_this_program();
    agent::env_map env = agent::current_environment();
    launcher::scheduler_env scheduler = launcher::detect_scheduler_env(parsed.options, env);
    launcher::launch_config config = launcher::resolve_launch_config(parsed.options, env);
    config.worker_args = launcher::resolve_worker_args(parsed.options, env);
    launcher::apply_scheduler_env(scheduler, config);
    launcher::check_worker_args(config);
    if (parsed.options.dry_run) {
      nlohmann::json out = launcher::to_json(config, env);
      launcher::add_scheduler_json(out, scheduler, config);
      // An argv that is not UTF-8 shows as U+FFFD instead of throwing.
      fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      return 0;
    }
    for (const auto& line : launcher::describe(scheduler)) fmt::print(stderr, "dtrun: {}\n", line);
    return launch(config, env);
  } catch (const launcher::usage_error& e) {
    return fail(agent::exit_usage, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
