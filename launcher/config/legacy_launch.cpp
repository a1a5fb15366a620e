#include "launcher/config/legacy_launch.h"

#include "agent/spec/virtual_local_rank.h"
#include "agent/spec/worker_env.h"

namespace dtrun::launcher {

agent::worker_customization resolve_worker_args(const launch_options& o,
                                                const env_map& env) {
  agent::worker_customization c;
  // torchrun's argv is [python, -u, (-m), script, args...]; with
  // --no-python the program is the script.
  c.script_args_at = o.no_python ? 0 : (o.module ? 3 : 2);
  c.template_args = o.template_args;
  c.virtual_local_rank = o.virtual_local_rank;
  // As torch 2.15: a non-empty HIP_VISIBLE_DEVICES is the list, else
  // CUDA_VISIBLE_DEVICES.
  if (auto hip = env.find("HIP_VISIBLE_DEVICES"); hip != env.end() && !hip->second.empty()) {
    c.parent_visible_devices = hip->second;
    c.parent_is_hip = true;
  } else if (auto visible = env.find("CUDA_VISIBLE_DEVICES"); visible != env.end()) {
    c.parent_visible_devices = visible->second;
  }
  if (o.legacy_launch && !o.use_env) {
    if (o.no_python) {
      // As torch.distributed.launch: a program that is not Python cannot be
      // assumed to parse --local-rank.
      throw usage_error("--legacy-launch with --no-python needs --use-env (the program gets "
                        "LOCAL_RANK in its environment instead of a --local-rank argument)");
    }
    c.local_rank = o.local_rank_arg == "underscore" ? agent::local_rank_arg::underscore
                                                    : agent::local_rank_arg::dash;
  }
  return c;
}

void check_worker_args(const agent::agent_options& options) {
  for (int local_rank = 0; local_rank < options.spec.local_world_size; ++local_rank) {
    env_map env = agent::static_worker_env(options.spec, local_rank, {});
    std::vector<std::string> args = options.args;
    try {
      agent::customize_worker(options.worker_args, args, env);
    } catch (const agent::no_visible_device& e) {
      throw usage_error(e.what());
    }
  }
}

}  // namespace dtrun::launcher
