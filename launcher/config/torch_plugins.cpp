#include "launcher/config/torch_plugins.h"

#include <fmt/format.h>

namespace dtrun::launcher {

std::string resolve_torch_plugins(const launch_options& o) {
  // "default" is the only entry point torch itself registers; not given
  // (torchrun's None) means the same class.
  if (!o.logs_specs.empty() && o.logs_specs != "default") {
    throw usage_error(fmt::format(
        "--logs-specs={}: logs specs are Python entry points (torchrun.logs_specs) that dtrun "
        "cannot load; only 'default' exists here: use --log-dir, --redirects, --tee and "
        "--local-ranks-filter instead",
        o.logs_specs));
  }
  // handlers.py's table: null and dynamic_rendezvous drop the events,
  // console writes them to stderr, which is dtrun's --event-log=-.
  const std::string& handler = o.event_log_handler;
  if (handler == "null" || handler == "dynamic_rendezvous") return o.event_log;
  if (handler == "console") return o.event_log.empty() ? "-" : o.event_log;
  throw usage_error(fmt::format(
      "--event-log-handler={}: event handlers are Python objects "
      "(torch.distributed.elastic.events) that dtrun cannot load; it knows null, console and "
      "dynamic_rendezvous: use --event-log=FILE (or --event-log=- for stderr) for dtrun's JSON "
      "events",
      handler));
}

}  // namespace dtrun::launcher
