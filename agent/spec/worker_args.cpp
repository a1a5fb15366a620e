#include "agent/spec/worker_args.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "agent/spec/template_substitute.h"
#include "agent/spec/virtual_local_rank.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

std::string get(const env_map& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

// LOCAL_RANK as a number; -1 when absent or not a number (the macro then
// has nothing to put in, and torch would never get there).
int local_rank_of(const env_map& env) {
  return parse_whole<int>(get(env, "LOCAL_RANK")).value_or(-1);
}

}  // namespace

bool has_local_rank_macro(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a.find('$') != std::string::npos; });
}

std::string expand_placeholders(const std::string& text, const env_map& env) {
  if (text.find('{') == std::string::npos) return text;
  const std::pair<const char*, const char*> placeholders[] = {
      {"{rank}", "RANK"},
      {"{local_rank}", "LOCAL_RANK"},
      {"{world_size}", "WORLD_SIZE"},
      {"{local_world_size}", "LOCAL_WORLD_SIZE"},
      {"{group_rank}", "GROUP_RANK"},
      {"{node_rank}", "GROUP_RANK"},
      {"{group_world_size}", "GROUP_WORLD_SIZE"},
      {"{round}", "TORCHELASTIC_RESTART_COUNT"},
      {"{restart_count}", "TORCHELASTIC_RESTART_COUNT"},
  };
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    bool replaced = false;
    if (text[i] == '{') {
      for (const auto& [name, var] : placeholders) {
        std::string_view n(name);
        if (text.compare(i, n.size(), n) == 0) {
          out += get(env, var);
          i += n.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

void customize_worker(const worker_customization& c, std::vector<std::string>& args,
                      env_map& env) {
  for (const auto& [k, v] : c.env_overrides) env[k] = v;
  int local_rank = local_rank_of(env);
  if (local_rank >= 0) {
    for (auto& arg : args) arg = substitute_local_rank_macro(arg, local_rank);
  }
  std::size_t at = std::min(c.script_args_at, args.size());
  if (c.template_args) {
    for (std::size_t i = at; i < args.size(); ++i) args[i] = expand_placeholders(args[i], env);
  }
  if (c.local_rank != local_rank_arg::none) {
    const char* flag = c.local_rank == local_rank_arg::dash ? "--local-rank=" : "--local_rank=";
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(at), flag + get(env, "LOCAL_RANK"));
  }
  if (c.virtual_local_rank) {
    std::string device =
        virtual_visible_device(local_rank, c.parent_visible_devices,
                               c.parent_is_hip ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES");
    if (c.parent_is_hip) env["HIP_VISIBLE_DEVICES"] = device;
    env["CUDA_VISIBLE_DEVICES"] = std::move(device);
    // A std::string, not the literal: GCC 12 at -O3 warns (-Wrestrict, a
    // false positive, GCC PR 105329) when a 1-character literal is assigned.
    env["LOCAL_RANK"] = std::string("0");
  }
}

}  // namespace dtrun::agent
