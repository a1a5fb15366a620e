#include "agent/python/warm_request.h"

#include <array>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {

bool is_per_worker_variable(const std::string& name) {
  static constexpr std::array<std::string_view, 16> names = {
      "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "GROUP_WORLD_SIZE",
      "ROLE_WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "CUDA_VISIBLE_DEVICES",
      "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
      "TORCH_NCCL_DUMP_ON_TIMEOUT"};
  for (auto n : names) {
    if (name == n) return true;
  }
  return name.rfind("DTRUN_", 0) == 0;
}

std::optional<std::string> preload_mismatch(const spawn_request& warm,
                                            const spawn_request& worker,
                                            std::size_t script_args_at) {
  if (warm.program != worker.program) return std::string("the program");
  if (script_args_at == 0 || script_args_at > warm.args.size() ||
      script_args_at > worker.args.size()) {
    return std::string("the interpreter's flags or the script");
  }
  for (std::size_t i = 0; i < script_args_at; ++i) {
    if (warm.args[i] != worker.args[i]) return std::string("the interpreter's flags or the script");
  }
  // Both maps are sorted: one walk finds a variable set on one side only
  // or set differently.
  auto a = warm.env.begin();
  auto b = worker.env.begin();
  while (a != warm.env.end() || b != worker.env.end()) {
    if (a != warm.env.end() && is_per_worker_variable(a->first)) {
      ++a;
    } else if (b != worker.env.end() && is_per_worker_variable(b->first)) {
      ++b;
    } else if (a == warm.env.end() || (b != worker.env.end() && b->first < a->first)) {
      return fmt::format("the variable {}", b->first);
    } else if (b == worker.env.end() || a->first < b->first) {
      return fmt::format("the variable {}", a->first);
    } else if (a->second != b->second) {
      return fmt::format("the variable {}", a->first);
    } else {
      ++a;
      ++b;
    }
  }
  return std::nullopt;
}

std::string spawn_message(const spawn_request& worker, std::size_t script_args_at,
                          const std::string& cwd) {
  std::string message = "spawn";
  auto field = [&message](const std::string& text) {
    message.push_back('\0');
    message += text;
  };
  field(cwd);
  field(std::to_string(worker.cpus.size()));
  for (int cpu : worker.cpus) field(std::to_string(cpu));
  std::size_t from = std::min(script_args_at, worker.args.size());
  field(std::to_string(worker.args.size() - from));
  for (std::size_t i = from; i < worker.args.size(); ++i) field(worker.args[i]);
  for (const auto& [key, value] : worker.env) field(key + "=" + value);
  return message;
}

std::optional<pid_t> pid_reply(std::string_view reply) {
  constexpr std::string_view prefix = "pid ";
  if (reply.substr(0, prefix.size()) != prefix) return std::nullopt;
  auto pid = parse_whole<pid_t>(std::string(reply.substr(prefix.size())));
  if (!pid || *pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace dtrun::agent
