// `dtrun report FILE... [--json] [--plot FILE.svg] [--run-id ID]`: a job's
// timeline and goodput from the agents' event logs (docs/observability.md,
// "dtrun report"). Exit codes: 0 done, 2 usage or a file that cannot be
// read or holds no dtrun event, 1 the plot could not be written.
#pragma once

namespace dtrun::launcher {

// argv[0] is the command's name ("report").
int run_report_command(int argc, char** argv);

}  // namespace dtrun::launcher
