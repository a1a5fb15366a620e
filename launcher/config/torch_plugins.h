// torchrun's two plug-in flags, which name Python objects dtrun cannot load:
//   --event-log-handler NAME  a handler of torch.distributed.elastic.events
//                             (handlers.py: null, console, dynamic_rendezvous)
//   --logs-specs NAME         an entry point of the torchrun.logs_specs group
//                             (torch registers one: default = DefaultLogsSpecs)
// The built-in names map to dtrun's own behaviour; any other name is a
// usage error that says what to use instead.
#pragma once

#include <string>

#include "launcher/cli/launch_options.h"

namespace dtrun::launcher {

// The event log these flags ask for: `event_log` (--event-log) unchanged,
// or "-" (stderr) for --event-log-handler=console when --event-log is not
// given. Throws usage_error for a name dtrun does not know.
std::string resolve_torch_plugins(const launch_options& options);

}  // namespace dtrun::launcher
