// This run's folder, like torchrun's per-run log folder: the workers'
// error files, logs and stacks go under it, one attempt_<round> folder per
// round.
#pragma once

#include <string>

namespace dtrun::agent {

// Creates <base>/<run_id>_XXXXXX (the run id made safe for a file name)
// and returns it; `base` is --log-dir, or $TMPDIR (else /tmp) when that is
// empty. Throws std::runtime_error with a one-line message when --log-dir
// cannot be created, std::system_error when the folder cannot.
std::string make_run_dir(const std::string& log_dir, const std::string& run_id);

}  // namespace dtrun::agent
