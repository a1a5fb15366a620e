#include "launcher/legacy_launch.h"

namespace dtrun::launcher {

agent::worker_customization resolve_worker_args(const launch_options& o) {
  agent::worker_customization c;
  // torchrun's argv is [python, -u, (-m), script, args...]; with
  // --no-python the program is the script.
  c.script_args_at = o.no_python ? 0 : (o.module ? 3 : 2);
  c.template_args = o.template_args;
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

}  // namespace dtrun::launcher
