#include "launcher/status/status_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "agent/monitor/control_client.h"
#include "agent/monitor/job_status.h"
#include "agent/spec/wall_clock.h"
#include "launcher/status/status_membership.h"
#include "launcher/status/status_store.h"
#include "launcher/status/status_table.h"
#include "rendezvous/base/endpoint.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/store/tcp_store_client.h"

namespace dtrun::launcher {

namespace {

constexpr auto status_timeout = std::chrono::seconds(5);
// Stacks are taken with py-spy or a signal and may take seconds per worker.
constexpr auto stacks_timeout = std::chrono::seconds(120);

const char* const no_job_hint =
    "no running dtrun job found for this user on this machine; start one with `dtrun "
    "--standalone --nproc-per-node=N train.py`, or reach a multi-node job with "
    "--rdzv-endpoint HOST:PORT --rdzv-id ID";

// CLI11's own exit handling, into a string (tests read it).
std::optional<int> parse_with(CLI::App& app, int argc, const char* const* argv, std::string& output) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    int code = app.exit(e, out, err);
    output = out.str() + err.str();
    return code == 0 ? 0 : 2;
  }
  return std::nullopt;
}

struct gathered {
  std::vector<agent::job_status> statuses;
  std::vector<std::string> errors;  // one line per agent that could not be asked
  std::string not_found;            // the store was asked and has no such job
  // The store's view only: its spares and quarantined machines.
  std::optional<job_membership> membership;
};

std::vector<agent::agent_endpoint> chosen_agents(std::optional<int> pid) {
  auto agents = agent::find_local_agents();
  if (!pid) return agents;
  std::vector<agent::agent_endpoint> one;
  for (auto& a : agents) {
    if (a.pid == *pid) one.push_back(a);
  }
  return one;
}

gathered gather(const status_options& o) {
  gathered g;
  if (!o.rdzv_endpoint.empty()) {
    auto ep = rendezvous::parse_endpoint(o.rdzv_endpoint, 29400);
    if (!ep) {
      g.errors.push_back(fmt::format("--rdzv-endpoint '{}' is not HOST:PORT", printable(o.rdzv_endpoint)));
      return g;
    }
    try {
      rendezvous::tcp_store_client_options options;
      options.host = ep->host;
      options.port = ep->port;
      options.detect_dialect = true;
      options.connect_timeout = status_timeout;
      options.timeout = status_timeout;
      rendezvous::tcp_store_client client(options);
      std::string error;
      if (!client.check({status_count_key(o.rdzv_id)})) {
        g.not_found = fmt::format("no dtrun agent published a status for run id '{}' at {} (is "
                                  "the job running, with this --rdzv-id?)",
                                  printable(o.rdzv_id), printable(o.rdzv_endpoint));
        return g;
      }
      if (auto s = read_job_status(client, o.rdzv_id, error)) {
        g.statuses.push_back(std::move(*s));
        g.membership = read_membership(client, o.rdzv_id, agent::wall_clock_seconds());
      } else {
        g.errors.push_back(error);
      }
    } catch (const std::exception& e) {
      g.errors.push_back(e.what());
    }
    return g;
  }
  for (const auto& a : chosen_agents(o.agent_pid)) {
    try {
      auto reply = agent::ask_agent(a.path, {{"op", "status"}}, status_timeout);
      std::string error;
      if (auto s = agent::from_json(reply, error)) {
        g.statuses.push_back(std::move(*s));
      } else {
        g.errors.push_back(fmt::format("agent {}: {}", a.pid, error));
      }
    } catch (const std::exception& e) {
      g.errors.push_back(fmt::format("agent {}: {}", a.pid, e.what()));
    }
  }
  // The agents of one run (several nodes on this host) are one job.
  g.statuses = agent::merge_runs(std::move(g.statuses));
  return g;
}

// The member count the status view knows (the nodes that published).
int active_nodes(const agent::job_status& s) {
  return s.nodes.empty() ? s.nnodes : static_cast<int>(s.nodes.size());
}

// One screenful; the exit code it stands for.
int show(const status_options& o, const gathered& g, std::string& out) {
  if (o.json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& s : g.statuses) {
      all.push_back(agent::to_json(s));
      if (g.membership) add_membership_json(all.back(), *g.membership, active_nodes(s));
    }
    out += all.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else {
    double now = agent::wall_clock_seconds();
    for (std::size_t i = 0; i < g.statuses.size(); ++i) {
      if (i > 0) out += "\n";
      out += render_status(g.statuses[i], now);
      if (g.membership) {
        out += "\n" + render_membership(*g.membership, active_nodes(g.statuses[i]), now);
      }
    }
  }
  if (!g.statuses.empty()) return 0;
  return g.errors.empty() ? exit_no_job : 1;  // not_found leaves errors empty
}

void print_errors(const gathered& g) {
  for (const auto& e : g.errors) fmt::print(stderr, "dtrun status: {}\n", printable(e));
}

}  // namespace

std::optional<int> parse_status_args(int argc, const char* const* argv, status_options& o,
                                     std::string& output) {
  CLI::App app("Show the running dtrun jobs of this user: job, nodes, workers.", "dtrun status");
  app.add_flag("--json", o.json, "Print dtrun.status/1 JSON documents (an array)");
  std::vector<std::string> watch_text;  // --watch alone gives none
  auto* watch = app.add_option("--watch", watch_text, "Redraw every SECONDS (default 2) until Ctrl-C")
                    ->expected(0, 1)
                    ->type_name("[SECONDS]");
  int pid = 0;
  auto* agent_flag = app.add_option("--agent", pid, "Ask only the agent with this pid")
                         ->check(CLI::Range(1, 0x3fffffff));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                 "Read a multi-node job from its rendezvous store (HOST:PORT)");
  app.add_option("--rdzv-id,--rdzv_id", o.rdzv_id, "The job's run id (with --rdzv-endpoint)");
  if (auto code = parse_with(app, argc, argv, output)) return code;
  o.watch = watch->count() > 0;
  bool number_ok = true;
  if (!watch_text.empty() && !watch_text.back().empty()) {
    auto seconds = parse_whole<double>(watch_text.back());
    number_ok = seconds.has_value();
    if (seconds) o.watch_seconds = *seconds;
  }
  if (o.watch && !(number_ok && o.watch_seconds >= 0.1 && o.watch_seconds <= 86400)) {
    output = "dtrun status: --watch takes seconds between 0.1 and 86400\n";
    return 2;
  }
  if (agent_flag->count() > 0) o.agent_pid = pid;
  if (o.rdzv_endpoint.empty() != o.rdzv_id.empty()) {
    output = "dtrun status: --rdzv-endpoint and --rdzv-id go together\n";
    return 2;
  }
  if (!o.rdzv_endpoint.empty() && o.agent_pid) {
    output = "dtrun status: --agent asks a local agent; it does not combine with --rdzv-endpoint\n";
    return 2;
  }
  return std::nullopt;
}

int run_status_command(int argc, char** argv) {
  status_options o;
  std::string output;
  if (auto code = parse_status_args(argc, argv, o, output)) {
    std::fputs(output.c_str(), *code == 0 ? stdout : stderr);
    return *code;
  }
  if (!o.watch) {
    auto g = gather(o);
    std::string out;
    int code = show(o, g, out);
    std::fputs(out.c_str(), stdout);
    print_errors(g);
    if (code == exit_no_job) {
      fmt::print(stderr, "dtrun status: {}\n",
                 g.not_found.empty() ? no_job_hint : printable(g.not_found));
    }
    return code;
  }
  // Redrawn until Ctrl-C (the default SIGINT action ends us; nothing to
  // clean up).
  auto period = std::chrono::duration<double>(o.watch_seconds);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  bool first = true;
  while (true) {
    auto g = gather(o);
    // A terminal is redrawn; a pipe or file gets plain snapshots, one after
    // the other, without escape codes.
    std::string out = tty ? "\x1b[H\x1b[2J" : first ? "" : "\n";  // home, clear screen
    first = false;
    if (show(o, g, out) == exit_no_job) out += std::string(no_job_hint) + "\n";
    for (const auto& e : g.errors) out += printable(e) + "\n";
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    std::this_thread::sleep_for(period);
  }
}

namespace {

// Each agent's run id, asked of the agent ("?" when it does not answer).
std::map<int, std::string> runs_of(const std::vector<agent::agent_endpoint>& agents) {
  std::map<int, std::string> runs;
  for (const auto& a : agents) {
    runs[a.pid] = "?";
    try {
      auto reply = agent::ask_agent(a.path, {{"op", "status"}}, status_timeout);
      std::string error;
      if (auto s = agent::from_json(reply, error)) runs[a.pid] = s->run_id;
    } catch (const std::exception&) {
      // Listed as "?": the stacks request would fail on it too, and say why.
    }
  }
  return runs;
}

std::size_t distinct_runs(const std::map<int, std::string>& runs) {
  std::set<std::string> distinct;
  for (const auto& [agent_pid, run] : runs) distinct.insert(run);
  return distinct.size();
}

}  // namespace

int run_stacks_command(int argc, char** argv) {
  CLI::App app("Print the Python stacks of the workers of the running dtrun jobs.", "dtrun stacks");
  bool json = false;
  int pid = 0;
  app.add_flag("--json", json, "Print the agents' replies as a JSON array");
  auto* agent_flag = app.add_option("--agent", pid, "Ask only the agent with this pid")
                         ->check(CLI::Range(1, 0x3fffffff));
  std::string run_id;
  auto* run_flag = app.add_option("--run-id,--run_id", run_id,
                                  "Ask only the agents of this run (TORCHELASTIC_RUN_ID)");
  std::string output;
  if (auto code = parse_with(app, argc, argv, output)) {
    std::fputs(output.c_str(), *code == 0 ? stdout : stderr);
    return *code;
  }
  auto agents = chosen_agents(agent_flag->count() > 0 ? std::optional<int>(pid) : std::nullopt);
  if (agents.empty()) {
    fmt::print(stderr, "dtrun stacks: {}\n", no_job_hint);
    return exit_no_job;
  }
  // Signalling every job of the user on this machine is not what one asks
  // for: with several runs here, one is chosen (--agent or --run-id).
  if (agent_flag->count() == 0) {
    auto runs = runs_of(agents);
    if (run_flag->count() > 0) {
      std::erase_if(agents, [&](const agent::agent_endpoint& a) { return runs[a.pid] != run_id; });
      if (agents.empty()) {
        fmt::print(stderr, "dtrun stacks: no running job with run id '{}' here; 'dtrun status' "
                           "lists them\n", printable(run_id));
        return exit_no_job;
      }
    } else if (std::size_t count = distinct_runs(runs); count > 1) {
      fmt::print(stderr, "dtrun stacks: {} runs have agents here; choose one with --run-id ID "
                         "or --agent PID:\n", count);
      for (const auto& a : agents) {
        fmt::print(stderr, "  --agent {}   (run {})\n", a.pid, printable(runs[a.pid]));
      }
      return 2;
    }
  }
  int code = 0;
  nlohmann::json replies = nlohmann::json::array();
  for (const auto& a : agents) {
    try {
      auto reply = agent::ask_agent(a.path, {{"op", "stacks"}}, stacks_timeout);
      if (json) {
        reply["agent_pid"] = a.pid;
        if (auto ok = reply.find("ok"); ok != reply.end() && *ok == false) code = 1;
        replies.push_back(std::move(reply));
        continue;
      }
      if (agents.size() > 1) fmt::print("agent {}:\n", a.pid);
      if (auto ok = reply.find("ok"); ok != reply.end() && *ok == false) {
        auto error = reply.value("error", std::string("the agent refused"));
        fmt::print(stderr, "dtrun stacks: agent {}: {}\n", a.pid, printable(error));
        code = 1;
        continue;
      }
      if (auto summary = reply.find("summary"); summary != reply.end() && summary->is_string()) {
        fmt::print("{}\n", printable(summary->get<std::string>(), /*keep_newlines=*/true));
      }
      if (auto files = reply.find("files"); files != reply.end() && files->is_array()) {
        for (const auto& f : *files) {
          if (f.is_string()) fmt::print("  {}\n", printable(f.get<std::string>()));
        }
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "dtrun stacks: agent {}: {}\n", a.pid, printable(e.what()));
      code = 1;
    }
  }
  if (json) fmt::print("{}\n", replies.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  return code;
}

}  // namespace dtrun::launcher
