#include "launcher/cli/cli_flags.h"

#include <algorithm>
#include <cctype>

namespace dtrun::launcher {
namespace {

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

void define_workers_flags(CLI::App& app, launch_options& o) {
  const std::string group_workers = "Worker group";
  add_option(app, "nnodes", o.nnodes.value, "Number of nodes, N or MIN:MAX")
      ->default_str(o.nnodes.value.text())
      ->group(group_workers);
  add_option(app, "nproc-per-node", o.nproc_per_node.value,
             "Workers per node: a number, auto, cpu, gpu or xpu")
      ->default_str(o.nproc_per_node.value.text())
      ->group(group_workers);
  add_option(app, "role", o.role, "Name of the workers' role")->group(group_workers);
  // Like torchrun 2.9+, a flag only: there is no PET_NUMA_BINDING.
  app.add_option(both_spellings("numa-binding"), o.numa_binding,
                 "Bind local rank n to CPUs near GPU n: node, socket, exclusive, core-complex")
      ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}))
      ->group(group_workers);
}

void define_rdzv_flags(CLI::App& app, launch_options& o) {
  const std::string group_rdzv = "Rendezvous";
  add_flag(app, "standalone", o.standalone,
           "Single node: a private store on 127.0.0.1 with a free port and a fresh run id")
      ->group(group_rdzv);
  add_option(app, "rdzv-backend", o.rdzv_backend.value,
             "Rendezvous backend (static, c10d, etcd-v3, etcd, etcd-v2): the etcd names all "
             "speak etcd's v3 API")
      ->group(group_rdzv);
  add_option(app, "rdzv-endpoint", o.rdzv_endpoint.value, "Rendezvous store, host[:port]")
      ->group(group_rdzv);
  add_option(app, "rdzv-id", o.rdzv_id.value, "Run id, shared by every node (TORCHELASTIC_RUN_ID)")
      ->group(group_rdzv);
  add_option(app, "rdzv-conf", o.rdzv_conf, "Rendezvous settings, k=v,k=v")->group(group_rdzv);
  add_option(app, "node-rank", o.node_rank.value, "This node's rank (static backend)")
      ->check(whole_number("--node-rank", 0, max_nnodes - 1))
      ->group(group_rdzv);
  add_option(app, "master-addr", o.master_addr.value, "Address of the rank-0 node (static backend)")
      ->group(group_rdzv);
  add_option(app, "master-port", o.master_port.value, "Port of the store on the rank-0 node")
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
}

void define_watch_flags(CLI::App& app, launch_options& o, const std::string& group_supervision);

void define_supervision_flags(CLI::App& app, launch_options& o) {
  const std::string group_supervision = "Supervision";
  add_option(app, "max-restarts", o.max_restarts,
             "Restarts of the worker group allowed after a failure")
      ->check(whole_number("--max-restarts", 0, max_restarts_limit))
      ->group(group_supervision);
  add_option(app, "no-restart-on", o.no_restart_on,
             "Failures that end the job at once whatever --max-restarts says: classes "
             "(exception, exit, signal, oom-kill, collective-timeout, hang, watchdog), "
             "exception:TypeName, exit:N, signal:NAME, comma-separated")
      ->group(group_supervision);
  add_option(app, "progress-file", o.progress_file,
             "A file the training writes its step into (one whole number); with "
             "--max-no-progress-restarts, restarts that do not move it stop the job")
      ->group(group_supervision);
  add_option(app, "max-no-progress-restarts", o.max_no_progress_restarts,
             "With --progress-file: stop the job after this many failed rounds in a row that "
             "did not move the step (0: never)")
      ->check(whole_number("--max-no-progress-restarts", 0, max_restarts_limit))
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
  add_option(app, "checkpoint-signal", o.checkpoint_signal,
             "On SIGTERM (or --preempt-notice), send this signal (e.g. SIGUSR1) to every worker "
             "of every node once, give this node's workers --stop-timeout to save and exit, "
             "then leave with exit code 76 (preempted)")
      ->group(group_supervision);
  add_option(app, "preempt-notice", o.preempt_notice,
             "A signal (e.g. SIGUSR1, Slurm's --signal=USR1@300) that asks the whole job for a "
             "checkpoint without stopping (needs --checkpoint-signal)")
      ->group(group_supervision);
  add_option(app, "monitor-interval", o.monitor_interval,
             "Accepted for torchrun compatibility; dtrun reacts to events, it does not poll")
      ->check(seconds_within("--monitor-interval", monitor_interval_limits))
      ->group(group_supervision);
  define_watch_flags(app, o, group_supervision);
}

// The rest of the Supervision group, in --help's order: hangs and
// sections, the start-up hook and --preload, the metrics server.
void define_watch_flags(CLI::App& app, launch_options& o, const std::string& group_supervision) {
  add_option(app, "hang-timeout", o.hang_timeout,
             "Seconds without progress from any worker (output, heartbeat file, file timer) "
             "after which dtrun captures every rank's stacks and fails the group (0: off)")
      ->check(seconds_within("--hang-timeout", hang_timeout_limits))
      ->group(group_supervision);
  add_option(app, "section-timeouts", o.section_timeouts,
             "How long a rank may stay in a section its training marks (dtrun.section(), "
             "dtrun.step()) before dtrun captures every rank's stacks and fails the group as a "
             "hang of that section: NAME=SECONDS or NAME=auto (learned), comma-separated, "
             "e.g. checkpoint=600,step=auto")
      ->group(group_supervision);
  add_option(app, "preload", o.preload,
             "Python modules a warm interpreter imports once per node, e.g. "
             "torch,torch.distributed; workers are forked from it, so a restart does not "
             "import them again (comma-separated)")
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
}

// --preflight alone is `once`; a value only as --preflight=VALUE, so the
// flag never takes the script after it.
void define_preflight_flags(CLI::App& app, launch_options& o, const std::string& group) {
  app.add_flag("--preflight{once}", o.preflight,
               "Before the training, run dtrun's check in the workers (a compute timing and "
               "bandwidth between nodes, with the job's backend) and name a node far below the "
               "job's median: once (the flag alone: the first round), every-round, or off")
      ->envname(pet_name("preflight"))
      ->check(CLI::IsMember({"off", "once", "every-round"}))
      ->default_str("off")
      ->group(group);
  add_option(app, "preflight-action", o.preflight_action,
             "What --preflight does with a slow node: warn, leave (a spare takes its place, or "
             "the job goes on smaller if --nnodes allows; else it only warns) or quarantine")
      ->check(CLI::IsMember({"warn", "leave", "quarantine"}))
      ->group(group);
  add_option(app, "straggler-action", o.straggler_action,
             "What a node named a straggler (its ranks' own work per step far above the job's "
             "median) does: warn, leave (as --preflight-action's) or quarantine")
      ->check(CLI::IsMember({"warn", "leave", "quarantine"}))
      ->group(group);
  add_option(app, "worker-timing", o.worker_timing,
             "on: the start-up hook times DDP and torch.distributed's collectives so that "
             "stragglers are named; off: it wraps nothing")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(group);
  add_option(app, "preflight-timeout", o.preflight_timeout,
             "Seconds the --preflight check may take; then the training starts without the "
             "figures that are missing")
      ->check(seconds_within("--preflight-timeout", {false, max_duration_s}))
      ->group(group);
}

void define_health_flags(CLI::App& app, launch_options& o) {
  const std::string group_health = "Node health";
  add_option(app, "node-health-check", o.node_health_check,
             "A command (sh -c) that must exit 0 before this node joins and every "
             "--node-health-check-interval while its workers run; 'builtin': the built-in "
             "checks (GPUs, disk, endpoint, network links, --storage-check) keep the node out "
             "too instead of only warning. Give it twice for both")
      ->expected(1)  // one value per flag: never the script after it
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(group_health);
  add_option(app, "node-health-check-interval", o.node_health_check_interval,
             "Seconds between health checks while the workers run (0: only before joining)")
      ->check(seconds_within("--node-health-check-interval", {true, max_duration_s}))
      ->group(group_health);
  add_option(app, "node-health-check-timeout", o.node_health_check_timeout,
             "Seconds a health check may take; then it is killed and counts as failed (a "
             "--storage-check path's deadline too)")
      ->check(seconds_within("--node-health-check-timeout", {false, max_duration_s}))
      ->group(group_health);
  add_option(app, "storage-check", o.storage_check,
             "Folders (comma-separated) that must answer a 4 KiB write, fsync and read within "
             "--node-health-check-timeout, checked with the node's health (a hung shared file "
             "system); warn-only unless --node-health-check=builtin")
      ->group(group_health);
  add_option(app, "node-unit", o.node_unit,
             "Keep an elastic job's node count a multiple of this (tensor or pipeline "
             "parallel groups); the nodes beyond wait as spares")
      ->check(whole_number("--node-unit", 1, max_nnodes))
      ->group(group_health);
  add_option(app, "gpu-reclaim-timeout", o.gpu_reclaim_timeout,
             "Seconds the GPUs may take to be given back after the workers stopped, before "
             "a new round on this node; then the node leaves the job (0: do not wait)")
      ->check(seconds_within("--gpu-reclaim-timeout", {true, max_duration_s}))
      ->group(group_health);
  add_option(app, "quarantine-after", o.quarantine_after,
             "Keep a machine out of the job after this many failures in a row that follow "
             "the machine (health checks, SIGBUS, ECC errors); 0: never")
      ->check(whole_number("--quarantine-after", 0, 1000))
      ->group(group_health);
  add_option(app, "quarantine-cooldown", o.quarantine_cooldown,
             "Seconds a machine's first quarantine lasts; each later one doubles, up to an hour")
      ->check(seconds_within("--quarantine-cooldown", {false, max_duration_s}))
      ->group(group_health);
  add_option(app, "quarantine-file", o.quarantine_file,
             "Write the job's quarantined hosts here, one per line (for Slurm's --exclude)")
      ->group(group_health);
  define_preflight_flags(app, o, group_health);
}

void define_program_flags(CLI::App& app, launch_options& o) {
  const std::string group_program = "Program";
  add_flag(app, "module", o.module, "Run the script as a Python module (python -m)", "-m")
      ->group(group_program);
  add_flag(app, "no-python", o.no_python, "Run the script as a program, without Python")
      ->group(group_program);
  add_flag(app, "run-path", o.run_path, "Accepted for torchrun compatibility; same as default")
      ->group(group_program);
  app.add_option("--python", o.python.value,
                 "Python interpreter for scripts (default: $DTRUN_PYTHON, else $PYTHON_EXEC, "
                 "else python3 on PATH)")
      ->envname("DTRUN_PYTHON")
      ->group(group_program);
  add_flag(app, "virtual-local-rank", o.virtual_local_rank,
           "LOCAL_RANK=0 in every worker, each seeing only its own GPU (CUDA_VISIBLE_DEVICES)")
      ->group(group_program);
}

void define_logs_flags(CLI::App& app, launch_options& o) {
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
  add_option(app, "log-line-prefix-template", o.log_line_prefix_template,
             "Prefix of each tee'd console line, with ${role_name}, ${rank}, ${local_rank}, "
             "${hostname} (default: $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "
             "[${role_name}${local_rank}]:)")
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
  // torchrun 2.14's; no PET_ variable, as torchrun (an argparse action).
  // Refused after parsing (cli.cpp), with or without a script.
  app.add_option(both_spellings("print-completion"), o.print_completion,
                 "torchrun's completion printer: refused, dtrun's packages install its bash "
                 "and zsh completions")
      ->check(CLI::IsMember({"bash", "zsh", "tcsh"}))
      ->group(group_logs);
  add_flag(app, "quiet", o.quiet, "Only errors and the failure summary", "-q")->group(group_logs);
  add_flag(app, "verbose", o.verbose, "Also debug messages (worker pids, rendezvous details)", "-v")
      ->group(group_logs);

  app.add_flag("--dry-run", o.dry_run, "Print the resolved launch configuration as JSON and exit")
      ->group("dtrun");

  // Command line only (no PET_ variable): see launch_options.
}

void define_ssh_flags(CLI::App& app, launch_options& o) {
  const std::string group_ssh = "Several hosts over ssh (docs/ssh.md)";
  app.add_option("--hosts", o.hosts.value,
                 "Run on these hosts, one agent each, started over ssh: host[:slots],... "
                 "(slots: workers there; Slurm ranges such as node[01-04] work)")
      ->group(group_ssh);
  app.add_option("--hostfile", o.hostfile.value,
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
}

void define_sched_flags(CLI::App& app, launch_options& o) {
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

}  // namespace

void define_flags(CLI::App& app, launch_options& o) {
  // In this order: --help lists the groups as they are first named.
  define_workers_flags(app, o);
  define_rdzv_flags(app, o);
  define_supervision_flags(app, o);
  define_health_flags(app, o);
  define_program_flags(app, o);
  define_logs_flags(app, o);
  define_ssh_flags(app, o);
  define_sched_flags(app, o);
}

}  // namespace dtrun::launcher
