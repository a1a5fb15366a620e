// Where each worker's stdout and stderr go: torchrun's --redirects, --tee
// and --local-ranks-filter, resolved per local rank as plain data (so it can
// be unit-tested and printed by --dry-run). No I/O here; worker_output does
// the plumbing.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dtrun::agent {

// torchrun's Std flags: which of a worker's two streams a setting covers.
enum std_streams : unsigned { std_none = 0, std_out = 1, std_err = 2, std_all = 3 };

// One --redirects or --tee value: the same streams for every local rank
// ("3"), or a per-rank map ("0:1,1:2") where ranks not named get none.
struct std_setting {
  unsigned all = std_none;           // when !is_map
  std::map<int, unsigned> per_rank;  // when is_map
  bool is_map = false;

  unsigned for_rank(int local_rank) const;
};

// Where one stream of one worker goes.
enum class stream_route {
  // The agent's own stdout/stderr, inherited: the agent is not in the
  // data path (the default, and the cost of it is zero).
  console,
  // /dev/null: a rank outside --local-ranks-filter whose stream is not
  // redirected (torchrun does the same).
  discard,
  // A rank inside --local-ranks-filter whose stream is neither redirected
  // nor tee'd: a pipe to the agent, which prints it line by line with the
  // rank's prefix (no file), so filtered output says whose it is.
  prefixed_console,
  // Written by the worker straight into <attempt>/<local_rank>/stdout.log
  // or stderr.log; the agent is not in the data path.
  file,
  // --tee: a pipe to the agent, which copies the bytes unchanged into the
  // file and, line by line with the rank's prefix, to its own stdout/stderr.
  file_and_console,
  // What `console` becomes under --hang-timeout: a pipe to the agent, which
  // copies each read unchanged (no prefix, no line assembly, so progress
  // bars with '\r' look as before) to its own stdout/stderr, and so sees
  // that the worker wrote something.
  watched_console,
};

const char* route_name(stream_route route);

struct worker_routes {
  stream_route out = stream_route::console;
  stream_route err = stream_route::console;
};

struct log_spec {
  std_setting redirects;
  std_setting tee;
  // nullopt: every rank is shown. Otherwise ranks outside the set show
  // nothing on the console: tee'd streams only go to their files and
  // streams that are not redirected are discarded (torchrun's semantics);
  // ranks in the set are printed with their prefix, tee'd or not.
  std::optional<std::set<int>> local_ranks_filter;
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; empty: torchrun's default
  // "[<role><local_rank>]:" (e.g. "[default0]:").
  std::string line_prefix_template;
  // --duplicate-stdout-filters / --duplicate-stderr-filters: each line of
  // a file_and_console stream (tee'd and shown) that contains one of these
  // is also written, prefixed, to <attempt>/filtered_stdout.log or
  // filtered_stderr.log, one file per attempt for all ranks (torchrun's
  // DefaultLogsSpecs layout). Empty: no file.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // --hang-timeout: the agent must see every shown stream's output, so
  // `console` streams become `watched_console` pipes.
  bool watch_console = false;
  // dtrun --hosts (the internal --prefix-console): every shown console
  // stream is prefixed like a filtered one, so the launching dtrun, which
  // adds the host, prints lines that say whose they are.
  bool prefix_console = false;

  worker_routes routes(int local_rank) const;
  // Whether any of `local_world_size` workers writes a log file.
  bool writes_files(int local_world_size) const;
};

// What a line prefix template may name, as torchrun's string.Template
// variables: $role_name, $rank, $local_rank, $hostname (torchrun 2.14: the
// short host name, gethostname), and dtrun's $group_rank, $restart_count.
struct prefix_fields {
  std::string role_name;
  int rank = 0;
  int local_rank = 0;
  int group_rank = 0;
  int restart_count = 0;
  std::string hostname;
};

// This machine's name as gethostname(2) gives it (Python's
// socket.gethostname()); empty when it cannot be read.
std::string this_host_name();

// The prefix put before each console line of a tee'd stream. With an empty
// template: "[" role local_rank "]:". Otherwise Python's
// Template.safe_substitute: $name and ${name} are replaced, "$$" is "$",
// anything else (unknown names, a lone "$") is kept as written.
std::string line_prefix(const std::string& prefix_template, const prefix_fields& fields);

}  // namespace dtrun::agent
