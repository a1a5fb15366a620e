#include "launcher/cli/cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "launcher/cli/cli_flags.h"
#include "launcher/cli/usage_hints.h"
#include "rendezvous/base/build_version.h"
#include "rendezvous/base/number_checks.h"
#include "rendezvous/base/number_parse.h"

namespace dtrun::launcher {
namespace {

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
// CLI11 read (PET_*), so scheduler detection never overrides either. Each
// flag that keeps its source has it beside its value (given_value); the
// flags read from PET_* are listed by name, in name order.
void record_given(const CLI::App& app, const std::vector<std::string>& own, launch_options& o) {
  std::set<const CLI::Option*> on_command_line;
  for (const auto& arg : own) {
    if (!is_flag_token(arg)) continue;
    std::string name = arg.rfind("--", 0) == 0 ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    if (const CLI::Option* opt = app.get_option_no_throw(name)) on_command_line.insert(opt);
  }
  const std::map<std::string, std::string*> sources = {
      {"nnodes", &o.nnodes.source},
      {"nproc-per-node", &o.nproc_per_node.source},
      {"rdzv-backend", &o.rdzv_backend.source},
      {"rdzv-endpoint", &o.rdzv_endpoint.source},
      {"rdzv-id", &o.rdzv_id.source},
      {"node-rank", &o.node_rank.source},
      {"master-addr", &o.master_addr.source},
      {"master-port", &o.master_port.source},
      {"python", &o.python.source},
      {"hosts", &o.hosts.source},
      {"hostfile", &o.hostfile.source},
  };
  std::map<std::string, std::string> from_variables;  // in name order
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    const std::string source =
        on_command_line.count(opt) > 0 ? command_line_source : opt->get_envname();
    if (auto field = sources.find(name); field != sources.end()) *field->second = source;
    if (source.rfind("PET_", 0) == 0) from_variables[name] = source;
  }
  for (const auto& [flag, variable] : from_variables) o.from_variables.push_back({flag, variable});
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

// No --stop-timeout or --shutdown-timeout given: torchrun's newer name for
// the same setting, from the environment; else torch's LaunchConfig
// default, TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
void stop_timeout_from_env(launch_options& o) {
  for (const char* name : {"PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}) {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') continue;
    o.stop_timeout =
        static_cast<double>(parse_duration_seconds(env, name, stop_timeout_limits).count()) /
        1000.0;
    return;
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
      "  dtrun report LOG [--plot F.svg]   a job's timeline and goodput from its --event-log\n"
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
  record_given(app, own_tokens, o);
  if (!o.print_completion.empty()) throw usage_error(print_completion_refusal);
  o.remote_args = without_fanout_flags(app, own_tokens);
  if (app.get_option("--stop-timeout")->count() == 0 &&
      app.get_option("--shutdown-timeout")->count() == 0) {
    stop_timeout_from_env(o);
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
