// The flags as given: each value as the user wrote it (on the command
// line or as PET_<FLAG>) and where it came from, before anything is
// resolved. Filled by parse_command_line (cli.h), completed by scheduler
// detection (scheduler_env.h), read by resolve_launch_config
// (resolve_launch_config.h).
#pragma once

#include <string>
#include <vector>

#include "rendezvous/base/usage_error.h"

namespace dtrun::launcher {

// Where a flag was given: on the command line, else the variable read
// (e.g. "PET_NNODES").
inline constexpr const char* command_line_source = "command line";

// A flag's value and, with it, where the user gave it. No source: not
// given, the value is the default (or what scheduler detection filled in:
// `derived`). Scheduler detection fills in only the flags not given.
template <typename T>
struct given_value {
  T value{};
  std::string source;  // "command line" or the variable ("PET_NNODES"); empty: not given
  bool derived = false;  // filled in by scheduler detection (scheduler_env.h)

  bool given() const { return !source.empty(); }
  // Given through a PET_<FLAG> variable (torchrun's environment flags).
  bool from_pet() const { return source.rfind("PET_", 0) == 0; }
  bool on_command_line() const { return source == command_line_source; }
  // Given by the user or filled in by scheduler detection: not the default.
  bool given_or_derived() const { return given() || derived; }
};

// A run's node count: --nnodes=N is N:N.
struct node_range {
  int min = 1;
  int max = 1;
};

// "2" or "1:4" -> a node range. Throws usage_error.
node_range parse_nnodes(const std::string& text);

// --nnodes: the text as given ("2", "1:4"; messages quote it) and the node
// range it means, parsed once, when the text is set. Scheduler detection
// sets a count instead, without text to parse. A text that does not parse
// keeps its usage error, thrown where the range is read (so a bad
// PET_NNODES fails where it did, named as it was).
class nnodes_flag {
 public:
  nnodes_flag(std::string text);  // NOLINT: CLI11 and tests assign the text
  nnodes_flag(const char* text) : nnodes_flag(std::string(text)) {}  // NOLINT
  explicit nnodes_flag(int nodes);  // N nodes, N:N

  const std::string& text() const { return text_; }
  // Throws the text's usage_error when it does not parse.
  node_range range() const;

 private:
  std::string text_;
  node_range range_;
  std::string error_;  // why text_ is refused; empty: it parsed
};

// --nproc-per-node: the text as given ("4", "auto", "cpu", "gpu", "xpu";
// messages quote it) and what it means, parsed once, when the text is set:
// a count, or what to count when the run is resolved (launch_config.h's
// parse_nproc). A text that is neither keeps its usage error, thrown where
// the count is read.
class nproc_flag {
 public:
  enum class kind { count, auto_detect, cpu, gpu, xpu };

  nproc_flag(std::string text);  // NOLINT: CLI11 and tests assign the text
  nproc_flag(const char* text) : nproc_flag(std::string(text)) {}  // NOLINT

  const std::string& text() const { return text_; }
  kind what() const { return kind_; }
  // A whole number of workers (not a name, not refused).
  bool is_number() const { return kind_ == kind::count && error_.empty(); }
  // The number; throws the text's usage_error when it is refused.
  int count() const;
  // gpu, xpu or auto: the visible accelerators decide.
  bool counts_accelerators() const {
    return kind_ == kind::auto_detect || kind_ == kind::gpu || kind_ == kind::xpu;
  }

 private:
  std::string text_;
  kind kind_ = kind::count;
  int count_ = 1;
  std::string error_;  // why text_ is refused; empty: it parsed
};

// A flag read from its variable rather than the command line.
struct flag_from_variable {
  std::string flag;      // the long name: "max-restarts"
  std::string variable;  // "PET_MAX_RESTARTS"
};

// The flags as given (strings where torchrun accepts several forms);
// resolve_launch_config() validates and interprets them.
struct launch_options {
  // Worker group and rendezvous.
  given_value<nnodes_flag> nnodes{"1:1"};
  given_value<nproc_flag> nproc_per_node{"1"};
  std::string numa_binding;  // empty: none; node, socket, exclusive, core-complex
  bool standalone = false;
  // Not given (nor derived): c10d when an endpoint is given, else static.
  given_value<std::string> rdzv_backend{"static"};
  given_value<std::string> rdzv_endpoint;
  given_value<std::string> rdzv_id{"none"};
  std::string rdzv_conf;
  given_value<int> node_rank{0};
  given_value<std::string> master_addr{"127.0.0.1"};
  given_value<int> master_port{29500};
  std::string local_addr;
  // Who may connect to the store dtrun hosts (docs/store.md).
  bool store_allow_any_user = false;
  std::string store_allow_networks;
  // Supervision.
  int max_restarts = 0;
  double monitor_interval = 0.1;  // accepted; dtrun reacts to events instead
  std::string start_method = "spawn";  // accepted; only for function entrypoints
  double stop_timeout = 30.0;          // seconds
  // --exit-barrier-timeout: seconds a node whose workers succeeded waits
  // for the others (torchrun's --rdzv-conf exit_barrier_timeout, also
  // proposed as a torchrun flag, pytorch#195543); 0: not given.
  double exit_barrier_timeout = 0.0;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // Restart policy (docs/agent.md, "Restart policy").
  std::string no_restart_on;          // failures that end the job at once
  std::string progress_file;          // the training's step, one whole number
  int max_no_progress_restarts = 3;   // with --progress-file; 0: never
  // Preemption (docs/agent.md, "Preemption"): the workers' checkpoint
  // signal, and the agent's early notice; empty: not given.
  std::string checkpoint_signal;
  std::string preempt_notice;
  // Observability (docs/observability.md).
  double hang_timeout = 0.0;  // seconds without progress from any worker; 0: off
  // --section-timeouts NAME=SECONDS|auto,...: how long a rank may stay in
  // a section (dtrun.section()); empty: not given.
  std::string section_timeouts;
  bool no_stack_hook = false;  // no start-up hook in Python workers (no Python stacks)
  // --preload: modules a warm interpreter imports once; Python workers are
  // forked from it (docs/agent.md, "Preload"). Empty: off.
  std::string preload;
  int metrics_port = -1;       // --metrics-port; -1: no metrics server
  std::string metrics_host = "127.0.0.1";
  // Node health (docs/agent.md, "Node health"): each value "builtin" (the
  // built-in checks keep the node out) or a command; empty: built-ins warn.
  std::vector<std::string> node_health_check;
  double node_health_check_interval = 300.0;  // seconds; 0: before the first join only
  double node_health_check_timeout = 60.0;    // seconds
  std::string storage_check;  // PATH,... (comma-separated); empty: none
  double gpu_reclaim_timeout = 30.0;  // seconds; 0: not waited for
  int node_unit = 1;  // a round's node count is a multiple of this
  int quarantine_after = 0;            // machine failures in a row; 0: no quarantine
  double quarantine_cooldown = 60.0;   // seconds, doubled each time up to an hour
  std::string quarantine_file;         // the quarantined hosts, one per line
  // --preflight (docs/agent.md, "Preflight"): off, once (the flag alone)
  // or every-round; what a slow node's verdict does; the check's bound.
  std::string preflight = "off";
  std::string preflight_action = "warn";
  double preflight_timeout = 120.0;  // seconds
  // docs/stragglers.md: what a node named a straggler does; whether the
  // start-up hook times the workers' own work per step.
  std::string straggler_action = "warn";
  std::string worker_timing = "on";
  // Program.
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  // --python or DTRUN_PYTHON, else PYTHON_EXEC, else python3 on PATH.
  given_value<std::string> python;
  // Not a flag: the interpreter of the Python environment dtrun is
  // installed in (installed_python.h), set by main; used after
  // PYTHON_EXEC and before python3 on PATH, as torchrun's sys.executable.
  std::string installed_python;
  bool virtual_local_rank = false;  // LOCAL_RANK=0, one visible device per worker
  // Logs.
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  // The console prefix of tee'd lines (torchrun 2.14); empty: not given, then
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, then "[${role_name}${local_rank}]:".
  std::string log_line_prefix_template;
  // torchrun 2.14's --print-completion SHELL; refused (dtrun's packages
  // install its completions). Empty: not given.
  std::string print_completion;
  std::string event_log;  // --event-log FILE ('-': stderr)
  // torchrun's plug-in names: only the built-in ones (launcher/config/torch_plugins.h).
  std::string event_log_handler = "null";
  std::string logs_specs;  // --logs-specs; empty: not given (torchrun's None)
  // Lines of tee'd streams containing any of these go to
  // <attempt>/filtered_std{out,err}.log ("a,b"; ",," is a literal comma).
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  bool quiet = false;     // -q/--quiet
  bool verbose = false;   // -v/--verbose
  // dtrun.
  bool dry_run = false;
  // A launch over ssh (docs/ssh.md). Command line only, no PET_ variable:
  // the remote dtrun inherits the exported PET_* and must not fan out again.
  given_value<std::string> hosts;     // --hosts h1,h2:4
  given_value<std::string> hostfile;  // --hostfile FILE
  std::string ssh;          // --ssh "CMD OPTS"; empty: ssh
  std::string export_vars;  // --export VAR,VAR=value
  std::string remote_dtrun; // --remote-dtrun PATH; empty: this dtrun's path
  int ssh_fanout = 64;      // --ssh-fanout N: connections being set up at once
  // Internal flags of an agent that dtrun --hosts started (hidden in --help).
  bool stop_on_stdin_eof = false;   // agent/process/stdin_watch.h
  bool prefix_console = false;      // agent/spec/log_spec.h
  std::string rdzv_port_via_stdio;  // "report" or "read" (launcher/ssh/ssh_plan.h)
  // dtrun's own part of the command line as given, without the ssh
  // launch's flags: what every remote dtrun is given.
  std::vector<std::string> remote_args;
  // Schedulers and the legacy launcher (docs/schedulers.md).
  bool no_scheduler_detect = false;
  bool legacy_launch = false;       // torch.distributed.launch: --local-rank=N argument
  bool use_env = false;             // with --legacy-launch: LOCAL_RANK only
  std::string local_rank_arg = "dash";  // dash: --local-rank=N, underscore: --local_rank=N
  bool template_args = false;       // {rank}, {local_rank}... in the script's arguments

  // The flags read from their PET_* variables rather than the command
  // line, by long name (--dry-run's "from_pet_env").
  std::vector<flag_from_variable> from_variables;

  std::string script;
  std::vector<std::string> script_args;
  // torchrun flags written after the script (they go to the script, as
  // with torchrun): warned about (launcher/cli/usage_hints.h).
  std::vector<std::string> flags_after_script;
};

// The backend the flags choose: --rdzv-backend (etcd and etcd-v2 are
// dtrun's etcd-v3), else c10d when an endpoint is given (as torchrun), else
// static. The one place that says so; resolve_multi_node refuses an
// unknown name.
std::string chosen_backend(const launch_options& options);

}  // namespace dtrun::launcher
