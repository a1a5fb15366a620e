#include "launcher/cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/base/build_version.h"
#include "rendezvous/base/number_checks.h"
#include "launcher/usage_hints.h"

namespace dtrun::launcher {
namespace {

// 0 is meaningful: SIGKILL right after the stop signal, as torchrun.
constexpr duration_limits stop_timeout_limits{true, max_duration_s};
// torchrun sleeps this long between polls; dtrun does not poll, so even 0
// (a busy loop in torchrun) costs nothing and is accepted.
constexpr duration_limits monitor_interval_limits{true, max_duration_s};
// 0 turns hang detection off.
constexpr duration_limits hang_timeout_limits{true, max_duration_s};

// "nproc-per-node" -> "--nproc-per-node,--nproc_per_node" (torchrun 2.x
// accepts both; 1.13 scripts use the underscores).
std::string both_spellings(const std::string& name, const std::string& short_name = "") {
  std::string names = short_name.empty() ? "" : short_name + ",";
  names += "--" + name;
  if (name.find('-') != std::string::npos) {
    std::string underscored = name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    names += ",--" + underscored;
  }
  return names;
}

// "nproc-per-node" -> "PET_NPROC_PER_NODE", as torchrun's env action.
std::string pet_name(const std::string& name) {
  std::string env = "PET_";
  for (char c : name) {
    env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return env;
}

template <typename T>
CLI::Option* add_option(CLI::App& app, const std::string& name, T& value,
                        const std::string& help, const std::string& short_name = "") {
  return app.add_option(both_spellings(name, short_name), value, help)
      ->envname(pet_name(name))
      ->capture_default_str();
}

CLI::Option* add_flag(CLI::App& app, const std::string& name, bool& value,
                      const std::string& help, const std::string& short_name = "") {
  return app.add_flag(both_spellings(name, short_name), value, help)->envname(pet_name(name));
}

void define_flags(CLI::App& app, launch_options& o) {
  const std::string group_workers = "Worker group";
  add_option(app, "nnodes", o.nnodes, "Number of nodes, N or MIN:MAX")->group(group_workers);
  add_option(app, "nproc-per-node", o.nproc_per_node,
             "Workers per node: a number, auto, cpu, gpu or xpu")->group(group_workers);
  add_option(app, "role", o.role, "Name of the workers' role")->group(group_workers);
  // Like torchrun 2.9+, a flag only: there is no PET_NUMA_BINDING.
  app.add_option(both_spellings("numa-binding"), o.numa_binding,
                 "Bind local rank n to CPUs near GPU n: node, socket, exclusive, core-complex")
      ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}))
      ->group(group_workers);

  const std::string group_rdzv = "Rendezvous";
  add_flag(app, "standalone", o.standalone,
           "Single node: a private store on 127.0.0.1 with a free port and a fresh run id")
      ->group(group_rdzv);
  add_option(app, "rdzv-backend", o.rdzv_backend,
             "Rendezvous backend (static, c10d, etcd-v3, etcd, etcd-v2): the etcd names all "
             "speak etcd's v3 API")
      ->group(group_rdzv);
  add_option(app, "rdzv-endpoint", o.rdzv_endpoint, "Rendezvous store, host[:port]")
      ->group(group_rdzv);
  add_option(app, "rdzv-id", o.rdzv_id, "Run id, shared by every node (TORCHELASTIC_RUN_ID)")
      ->group(group_rdzv);
  add_option(app, "rdzv-conf", o.rdzv_conf, "Rendezvous settings, k=v,k=v")->group(group_rdzv);
  add_option(app, "node-rank", o.node_rank, "This node's rank (static backend)")
      ->check(whole_number("--node-rank", 0, max_nnodes - 1))
      ->group(group_rdzv);
  add_option(app, "master-addr", o.master_addr, "Address of the rank-0 node (static backend)")
      ->group(group_rdzv);
  add_option(app, "master-port", o.master_port, "Port of the store on the rank-0 node")
      ->check(whole_number("--master-port", 0, max_port))
      ->group(group_rdzv);
  add_option(app, "local-addr", o.local_addr, "This node's address, as the others reach it")
      ->group(group_rdzv);
  add_flag(app, "store-allow-any-user", o.store_allow_any_user,
           "Let every local user's processes use the single-node store (default: yours only)")
      ->group(group_rdzv);
  add_option(app, "store-allow-networks", o.store_allow_networks,
             "Multi-node store: admit clients from these networks only (and this machine), "
             "e.g. 10.0.0.0/8,fd00::/8")
      ->group(group_rdzv);

  const std::string group_supervision = "Supervision";
  add_option(app, "max-restarts", o.max_restarts,
             "Restarts of the worker group allowed after a failure")
      ->check(whole_number("--max-restarts", 0, max_restarts_limit))
      ->group(group_supervision);
  add_option(app, "stop-timeout", o.stop_timeout,
             "Seconds between the stop signal and SIGKILL (alias --shutdown-timeout)")
      ->check(seconds_within("--stop-timeout", stop_timeout_limits))
      ->group(group_supervision);
  // torchrun's newer name, bound to the same value.
  app.add_option(both_spellings("shutdown-timeout"), o.stop_timeout,
                 "torchrun's name of --stop-timeout (default: $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, "
                 "else 30)")
      ->check(seconds_within("--shutdown-timeout", stop_timeout_limits))
      ->group(group_supervision);
  add_option(app, "exit-barrier-timeout", o.exit_barrier_timeout,
             "Seconds a node whose workers all succeeded waits for the other nodes to finish "
             "(the same as --rdzv-conf exit_barrier_timeout; default 300)")
      ->check(seconds_within("--exit-barrier-timeout", {false, max_duration_s}))
      ->default_str("")
      ->group(group_supervision);
  add_option(app, "signals-to-handle", o.signals_to_handle,
             "Signals forwarded to the workers (SIGINT, SIGTERM, SIGHUP and SIGQUIT always are)")
      ->group(group_supervision);
  add_option(app, "monitor-interval", o.monitor_interval,
             "Accepted for torchrun compatibility; dtrun reacts to events, it does not poll")
      ->check(seconds_within("--monitor-interval", monitor_interval_limits))
      ->group(group_supervision);
  add_option(app, "hang-timeout", o.hang_timeout,
             "Seconds without progress from any worker (output, heartbeat file, file timer) "
             "after which dtrun captures every rank's stacks and fails the group (0: off)")
      ->check(seconds_within("--hang-timeout", hang_timeout_limits))
      ->group(group_supervision);
  add_flag(app, "no-stack-hook", o.no_stack_hook,
           "Do not load dtrun's start-up hook in Python workers (then no Python stacks)")
      ->group(group_supervision);
  add_option(app, "metrics-port", o.metrics_port,
             "Serve Prometheus metrics on /metrics and the status on /status at this port "
             "(0: any free port, printed; default: no metrics server)")
      ->check(whole_number("--metrics-port", 0, max_port))
      ->default_str("")  // -1 is the internal 'off', not a port to show
      ->group(group_supervision);
  add_option(app, "metrics-host", o.metrics_host,
             "Address the metrics server listens on (default 127.0.0.1: this machine only)")
      ->group(group_supervision);
  add_option(app, "start-method", o.start_method,
             "Accepted for torchrun compatibility (spawn, fork, forkserver)")
      ->check(CLI::IsMember({"spawn", "fork", "forkserver"}))
      ->group(group_supervision);

  const std::string group_program = "Program";
  add_flag(app, "module", o.module, "Run the script as a Python module (python -m)", "-m")
      ->group(group_program);
  add_flag(app, "no-python", o.no_python, "Run the script as a program, without Python")
      ->group(group_program);
  add_flag(app, "run-path", o.run_path, "Accepted for torchrun compatibility; same as default")
      ->group(group_program);
  app.add_option("--python", o.python,
                 "Python interpreter for scripts (default: $DTRUN_PYTHON, else $PYTHON_EXEC, "
                 "else python3 on PATH)")
      ->envname("DTRUN_PYTHON")
      ->group(group_program);
  add_flag(app, "virtual-local-rank", o.virtual_local_rank,
           "LOCAL_RANK=0 in every worker, each seeing only its own GPU (CUDA_VISIBLE_DEVICES)")
      ->group(group_program);

  const std::string group_logs = "Logs";
  add_option(app, "log-dir", o.log_dir,
             "Base folder of <run_id>_<random>/attempt_<n>/<local_rank>/ with the workers' "
             "error.json, stdout.log, stderr.log (default: a temporary folder)")
      ->group(group_logs);
  add_option(app, "redirects", o.redirects,
             "Worker streams written to log files instead of the console: 0 none, 1 stdout, "
             "2 stderr, 3 both, or per local rank, e.g. 0:3,1:2",
             "-r")
      ->group(group_logs);
  add_option(app, "tee", o.tee,
             "Worker streams written to log files and also to the console with a "
             "[<role><local_rank>]: prefix per line; same values as --redirects",
             "-t")
      ->group(group_logs);
  add_option(app, "local-ranks-filter", o.local_ranks_filter,
             "Local ranks whose output reaches the console, e.g. 0 or 0,3 (default: all)")
      ->group(group_logs);

  add_option(app, "duplicate-stdout-filters", o.duplicate_stdout_filters,
             "Also copy tee'd stdout lines containing any of these strings (a,b; ',,' is a "
             "comma) to <attempt>/filtered_stdout.log")
      ->group(group_logs);
  add_option(app, "duplicate-stderr-filters", o.duplicate_stderr_filters,
             "The same for stderr, into <attempt>/filtered_stderr.log")
      ->group(group_logs);
  add_option(app, "event-log", o.event_log,
             "Append the agent's events as JSON lines to this file ('-': stderr)")
      ->group(group_logs);
  add_option(app, "event-log-handler", o.event_log_handler,
             "torchrun's event handler: null, dynamic_rendezvous (no events) or console "
             "(as --event-log=-)")
      ->group(group_logs);
  // As torchrun: no PET_LOGS_SPECS.
  app.add_option(both_spellings("logs-specs"), o.logs_specs,
                 "torchrun's logs specs: only 'default' (dtrun's own log layout)")
      ->group(group_logs);
  add_flag(app, "quiet", o.quiet, "Only errors and the failure summary", "-q")->group(group_logs);
  add_flag(app, "verbose", o.verbose, "Also debug messages (worker pids, rendezvous details)", "-v")
      ->group(group_logs);

  app.add_flag("--dry-run", o.dry_run, "Print the resolved launch configuration as JSON and exit")
      ->group("dtrun");

  // Command line only (no PET_ variable): see launch_options.
  const std::string group_ssh = "Several hosts over ssh (docs/ssh.md)";
  app.add_option("--hosts", o.hosts,
                 "Run on these hosts, one agent each, started over ssh: host[:slots],... "
                 "(slots: workers there; Slurm ranges such as node[01-04] work)")
      ->group(group_ssh);
  app.add_option("--hostfile", o.hostfile,
                 "The hosts from a file: 'host slots=N' per line, # comments (DeepSpeed's and "
                 "MPI's format)")
      ->group(group_ssh);
  app.add_option("--ssh", o.ssh,
                 "The ssh command and its options (default: ssh); dtrun adds -o BatchMode=yes "
                 "-o ConnectTimeout=30")
      ->group(group_ssh);
  app.add_option("--export", o.export_vars,
                 "Also pass these variables to the remote workers: VAR,VAR=value,... (PET_*, "
                 "TORCH*, NCCL*, PYTHON*, GLOO*, UCX*, MV2*, MLFLOW*, CUDA_VISIBLE_DEVICES and "
                 "OMP_NUM_THREADS always are)")
      ->group(group_ssh);
  app.add_option("--ssh-fanout", o.ssh_fanout,
                 "How many ssh connections are set up at once; each slot frees when that "
                 "host's agent runs, so every host still joins")
      ->check(whole_number("--ssh-fanout", 1, max_nnodes))
      ->capture_default_str()
      ->group(group_ssh);
  app.add_option("--remote-dtrun", o.remote_dtrun,
                 "dtrun's path on the hosts (default: this dtrun's absolute path)")
      ->group(group_ssh);
  // Internal: how dtrun --hosts starts the agent on each host.
  app.add_flag("--stop-on-stdin-eof", o.stop_on_stdin_eof)->group("");
  app.add_flag("--prefix-console", o.prefix_console)->group("");
  app.add_option("--rdzv-port-via-stdio", o.rdzv_port_via_stdio)
      ->check(CLI::IsMember({"report", "read"}))
      ->group("");

  const std::string group_sched = "Schedulers and legacy launch (docs/schedulers.md)";
  app.add_flag("--no-scheduler-detect", o.no_scheduler_detect,
               "Ignore Slurm's and Kubernetes' variables (by default they fill in unset flags)")
      ->envname("DTRUN_NO_SCHEDULER_DETECT")
      ->group(group_sched);
  add_flag(app, "legacy-launch", o.legacy_launch,
           "torch.distributed.launch's behaviour: pass --local-rank=N to each worker")
      ->group(group_sched);
  add_flag(app, "use-env", o.use_env, "With --legacy-launch: LOCAL_RANK only, no argument")
      ->group(group_sched);
  add_option(app, "local-rank-arg", o.local_rank_arg,
             "--legacy-launch's argument: dash (--local-rank, torch 2) or underscore (torch 1)")
      ->check(CLI::IsMember({"dash", "underscore"}))
      ->group(group_sched);
  add_flag(app, "template-args", o.template_args,
           "Replace {rank}, {local_rank}, {world_size}... in the script's arguments per worker")
      ->group(group_sched);
}

bool is_flag_token(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

// argparse's test for an option string: a dash, and not a negative number
// (-1, -2.5, -.5).
bool looks_like_a_flag(const std::string& arg) {
  static const std::regex negative_number(R"(^-\d+$|^-\d*\.\d+$)");
  return is_flag_token(arg) && !std::regex_match(arg, negative_number);
}

// Splits args into dtrun's part and the script's part. The first token
// that is neither a flag nor a flag's value is the script; "--" also ends
// dtrun's part. Which flags take a value is asked of the CLI11 app, so
// this cannot drift from the definitions above. Unknown flags stay in
// dtrun's part for CLI11 to reject.
// A flag and the separate token it took as its value ("--nproc-per-node",
// "train.py"): when no script is left, the flag may have swallowed it.
struct taken_value {
  std::string flag;
  std::string value;
};

void split_args(const CLI::App& app, const std::vector<std::string>& args,
                std::vector<std::string>& own, launch_options& o,
                std::vector<taken_value>& taken, bool& after_separator) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      after_separator = true;
      if (i + 1 < args.size()) {
        o.script = args[i + 1];
        o.script_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 2, args.end());
      }
      return;
    }
    if (!is_flag_token(arg)) {
      o.script = arg;
      o.script_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      return;
    }
    bool long_form = arg.rfind("--", 0) == 0;
    std::string name = long_form ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    bool value_attached = long_form ? arg.find('=') != std::string::npos : arg.size() > 2;
    const CLI::Option* opt = app.get_option_no_throw(name);
    bool takes_value = opt != nullptr && opt->get_expected_min() > 0;
    if (takes_value && long_form && arg.size() == name.size() + 1) {
      // "--role=": an empty value, as argparse reads it. CLI11 would take
      // the next token instead ("--role= --dry-run x.py" would run x.py
      // with role "--dry-run"), so the empty value goes as its own token.
      own.push_back(name);
      own.emplace_back();
      continue;
    }
    own.push_back(arg);
    if (takes_value && !value_attached && i + 1 < args.size()) {
      // As argparse: a next token that looks like a flag (not a negative
      // number) is not this flag's value. CLI11 would take it: "--role
      // --dry-run x.py" would run x.py for real, with role "--dry-run".
      if (looks_like_a_flag(args[i + 1])) {
        throw usage_error(fmt::format(
            "{}: needs a value (got the flag {}; a value that starts with '-' goes as {}=VALUE) "
            "(run 'dtrun --help')",
            name, args[i + 1], name));
      }
      own.push_back(args[++i]);
      taken.push_back({name, args[i]});
    }
  }
}

// "--nproc-per-node train.py": the flag took the script as its value. Only
// a value that reads as a script is named (ends in .py), never a number.
std::optional<std::string> swallowed_script(const std::vector<taken_value>& taken) {
  for (const auto& t : taken) {
    if (t.value.size() > 3 && t.value.compare(t.value.size() - 3, 3, ".py") == 0) {
      return fmt::format(
          "{} took the script '{}' as its value, so no script is left; give {} its value "
          "first ({}=VALUE {})",
          t.flag, t.value, t.flag, t.flag, t.value);
    }
  }
  return std::nullopt;
}

// Every long flag name, as "--name", the spelling the user wrote first
// ("--nproc_per_nodes" is told "--nproc_per_node").
std::vector<std::string> long_flag_names(const CLI::App& app, bool underscores_first) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // internal flags are not suggested
    auto lnames = opt->get_lnames();
    std::stable_sort(lnames.begin(), lnames.end(), [&](const std::string& a, const std::string& b) {
      bool a_first = (a.find('_') != std::string::npos) == underscores_first;
      bool b_first = (b.find('_') != std::string::npos) == underscores_first;
      return a_first && !b_first;
    });
    for (const auto& name : lnames) names.push_back("--" + name);
  }
  return names;
}

// "; did you mean --nproc-per-node?" for the first unknown flag close to a
// known one, else nothing.
std::string did_you_mean(const CLI::App& app, const std::string& extras) {
  std::string first = extras.substr(0, extras.find(' '));
  std::string name = first.substr(0, first.find('='));
  if (name.rfind("--", 0) != 0) return "";
  auto near = nearest_word(name, long_flag_names(app, name.find('_') != std::string::npos));
  return near ? fmt::format("; did you mean {}?", *near) : std::string();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Which flags were given and where from: the command line, or the variable
// CLI11 read (PET_*), so scheduler detection never overrides either.
void record_given(const CLI::App& app, const std::vector<std::string>& own,
                  std::map<std::string, std::string>& given) {
  std::set<const CLI::Option*> on_command_line;
  for (const auto& arg : own) {
    if (!is_flag_token(arg)) continue;
    std::string name = arg.rfind("--", 0) == 0 ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    if (const CLI::Option* opt = app.get_option_no_throw(name)) on_command_line.insert(opt);
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    given[opt->get_lnames().front()] =
        on_command_line.count(opt) > 0 ? "command line" : opt->get_envname();
  }
}

// "--master-port: ..." -> "PET_MASTER_PORT (--master-port): ..." when the
// flag is not on the command line but its variable is set.
std::string name_the_variable(const CLI::App& app, const std::vector<std::string>& own,
                              const std::string& message) {
  std::string flag = message.substr(0, message.find(':'));
  const CLI::Option* opt = app.get_option_no_throw(flag);
  if (opt == nullptr || opt->get_envname().empty()) return message;
  for (const auto& arg : own) {
    if (!is_flag_token(arg)) continue;
    std::string name = arg.rfind("--", 0) == 0 ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    if (app.get_option_no_throw(name) == opt) return message;
  }
  return fmt::format("{} ({}){}", opt->get_envname(), flag, message.substr(flag.size()));
}

// dtrun's own tokens without those of the ssh launch itself (and
// --dry-run): what the remote dtrun of every host is given.
std::vector<std::string> without_fanout_flags(const CLI::App& app,
                                              const std::vector<std::string>& own) {
  static const std::set<std::string> local_only = {"--hosts", "--hostfile", "--ssh", "--export",
                                                   "--remote-dtrun", "--ssh-fanout",
                                                   "--dry-run"};
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < own.size(); ++i) {
    const std::string& arg = own[i];
    bool long_form = arg.rfind("--", 0) == 0;
    std::string name = long_form ? arg.substr(0, arg.find('=')) : arg;
    if (!long_form || local_only.count(name) == 0) {
      kept.push_back(arg);
      continue;
    }
    const CLI::Option* opt = app.get_option_no_throw(name);
    bool takes_value = opt != nullptr && opt->get_expected_min() > 0;
    if (takes_value && arg.find('=') == std::string::npos) ++i;  // its value
  }
  return kept;
}

bool is_a_file_here(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The word where the script goes, when it is no script: Python itself
// (`dtrun python train.py`, as one would write `python train.py`), or a
// subcommand misspelt or not in first place (`dtrun statuss`, `dtrun help`).
// A file of that name is always run as the script.
void check_script_word(const std::string& word, parse_result& result, const CLI::App& app) {
  if (names_a_python_interpreter(word)) {
    throw usage_error(fmt::format(
        "'{}' is where the script goes: dtrun runs the script with Python itself, as torchrun "
        "does; write dtrun [OPTIONS] train.py (choose the interpreter with --python={}; "
        "--no-python runs a program as it is)",
        word, word));
  }
  if (word.find('/') != std::string::npos || word.find('.') != std::string::npos ||
      is_a_file_here(word)) {
    return;
  }
  if (word == "help") {
    result.help = true;
    result.help_text = app.help();
    return;
  }
  if (std::find(subcommands().begin(), subcommands().end(), word) != subcommands().end()) {
    throw usage_error(fmt::format(
        "'{}' is not a file here; 'dtrun {}' is a command only as dtrun's first word: run "
        "dtrun {} [OPTIONS]",
        word, word, word));
  }
  if (auto near = nearest_word(word, subcommands())) {
    throw usage_error(fmt::format(
        "'{}' is neither a file here nor a dtrun command; did you mean 'dtrun {}'?", word, *near));
  }
}

}  // namespace

parse_result parse_command_line(const std::vector<std::string>& args) {
  parse_result result;
  launch_options& o = result.options;
  CLI::App app("dtrun: a fast, torchrun-compatible launcher for distributed PyTorch jobs.",
               "dtrun");
  app.footer(
      "Then the program: script.py [args...], -m module [args...], or --no-python program\n"
      "[args...]. Everything from the script on goes to the workers untouched; a '--' may\n"
      "separate it from dtrun's flags. Every flag also reads PET_<FLAG> from the environment\n"
      "(e.g. PET_NPROC_PER_NODE); the command line wins.\n"
      "\n"
      "Commands, as the first word (each has --help):\n"
      "  dtrun status [--json] [--watch]   the running jobs of this user: nodes, workers\n"
      "  dtrun stacks [--agent PID]        every rank's Python stacks, without stopping it\n"
      "  dtrun help                        this help");
  app.get_formatter()->column_width(34);
  // A repeated flag: the last one wins, as with torchrun (argparse).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  define_flags(app, o);
  // Answered before the script is required: `dtrun --version` alone works.
  app.set_version_flag("--version", fmt::format("dtrun {}", build_version()),
                       "Print dtrun's version and the git commit it was built from");

  std::vector<std::string> own;
  std::vector<taken_value> taken;
  bool after_separator = false;  // "-- script": what follows is meant for it
  split_args(app, args, own, o, taken, after_separator);
  // A usage error whose real cause is a flag that took the script.
  auto or_swallowed = [&](const std::string& message) {
    if (auto swallowed = swallowed_script(taken)) return *swallowed;
    return message;
  };
  const std::vector<std::string> own_tokens = own;  // parse() consumes `own`
  std::reverse(own.begin(), own.end());  // CLI11 consumes from the back
  try {
    app.parse(own);
  } catch (const CLI::CallForHelp&) {
    result.help = true;
    result.help_text = app.help();
    return result;
  } catch (const CLI::CallForVersion& e) {
    result.help = true;
    result.help_text = fmt::format("{}\n", e.what());
    return result;
  } catch (const CLI::ExtrasError& e) {
    // CLI11 says "The following arguments were not expected: --foo".
    std::string line = first_line(e.what());
    std::string extras = line.substr(line.find(':') + 2 <= line.size() ? line.find(':') + 2 : 0);
    throw usage_error(or_swallowed(fmt::format(
        "unrecognized arguments: {}{} (run 'dtrun --help' for dtrun's flags; the script's own "
        "flags go after the script)",
        extras, did_you_mean(app, extras))));
  } catch (const CLI::ArgumentMismatch& e) {
    // "--max-restarts" last with no value: CLI11 says "1 required INT:0..1000000 missing".
    std::string line = first_line(e.what());
    throw usage_error(fmt::format("{}: needs a value (run 'dtrun --help')",
                                  line.substr(0, line.find(':'))));
  } catch (const CLI::ParseError& e) {
    throw usage_error(or_swallowed(fmt::format("{} (run 'dtrun --help')", first_line(e.what()))));
  } catch (const usage_error& e) {
    // A bad number (rendezvous/base/number_checks.h). Say so when it came from
    // PET_<FLAG> rather than the command line.
    throw usage_error(or_swallowed(name_the_variable(app, own_tokens, e.what())));
  }
  record_given(app, own_tokens, o.given);
  o.remote_args = without_fanout_flags(app, own_tokens);
  o.master_port_given = app.get_option("--master-port")->count() > 0;
  o.rdzv_backend_given = app.get_option("--rdzv-backend")->count() > 0;
  if (app.get_option("--stop-timeout")->count() == 0 &&
      app.get_option("--shutdown-timeout")->count() == 0) {
    // torchrun's newer name for the same setting, from the environment;
    // else torch's LaunchConfig default, TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
    for (const char* name : {"PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}) {
      const char* env = std::getenv(name);
      if (env == nullptr || *env == '\0') continue;
      o.stop_timeout =
          static_cast<double>(parse_duration_seconds(env, name, stop_timeout_limits).count()) /
          1000.0;
      break;
    }
  }
  if (o.script.empty()) {
    throw usage_error(or_swallowed(
        "no training script given: dtrun [OPTIONS] script.py [args...] (run 'dtrun --help')"));
  }
  if (!o.no_python && !o.module) check_script_word(o.script, result, app);
  if (!after_separator) o.flags_after_script = launcher_flags_among(o.script_args);
  return result;
}

}  // namespace dtrun::launcher
