#include "launcher/config/program_lookup.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "agent/process/worker_process.h"
#include "agent/spec/exit_status.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::launcher {
namespace fs = std::filesystem;

namespace {

std::string path_of(const env_map& env) {
  auto it = env.find("PATH");
  return it == env.end() ? std::string() : it->second;
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto full = fs::absolute(path, ec);
  return ec ? path : full.lexically_normal().string();
}

// The script Python will open: a file path, unless the worker's argument
// is built per rank (${local_rank}) or is not a file (-m module, "-c").
bool names_a_script_file(const launch_config& c) {
  const std::string& script = c.agent.script_name;
  const std::vector<std::string>& args = c.agent.args;
  if (!c.program_is_python || script.empty() || script[0] == '-') return false;
  if (script.find('$') != std::string::npos) return false;
  // -m: the module name comes right after "-m" in the arguments.
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "-m" && args[i + 1] == script) return false;
  }
  return true;
}

}  // namespace

std::string interpreter_choice(const launch_config& config) {
  return config.python_source.empty() ? "python3 on PATH" : config.python_source;
}

std::string describe_interpreter(const launch_config& config) {
  if (!config.program_is_python) return "";
  const std::string& path = config.agent.program.empty() ? config.program : config.agent.program;
  return fmt::format("{} ({})", path, interpreter_choice(config));
}

std::optional<program_problem> find_program(launch_config& config, const env_map& env) {
  auto found = agent::resolve_program(config.program, path_of(env));
  if (!found) {
    if (config.program_is_python) {
      return program_problem{
          exit_not_found,
          fmt::format("Python interpreter '{}'{} not found on PATH; pass --python=/path/to/python "
                      "or set DTRUN_PYTHON",
                      config.program,
                      config.python_source.empty()
                          ? ""
                          : fmt::format(" (from {})", config.python_source))};
    }
    return program_problem{exit_not_found,
                           fmt::format("program '{}' not found on PATH", config.program)};
  }
  config.agent.program = absolute(*found);
  config.agent.interpreter = describe_interpreter(config);
  if (auto failure = agent::check_program(*found)) {
    return program_problem{failure->exit_code, failure->error};
  }
  if (names_a_script_file(config)) {
    struct stat st {};
    if (::stat(config.agent.script_name.c_str(), &st) != 0) {
      return program_problem{
          exit_not_found,
          fmt::format("script '{}' not found: looked for {} (a relative path is taken from the "
                      "folder dtrun runs in); no worker was started",
                      config.agent.script_name, absolute(config.agent.script_name))};
    }
  }
  return std::nullopt;
}

}  // namespace dtrun::launcher
