// What `dtrun --version` and `dtrun-store --version` print.
#pragma once

#include <string_view>

namespace dtrun {

// "<project VERSION> (<commit>)": the commit is git's short hash of the
// checkout it was built from, "-dirty" appended when tracked files had
// changes, or "unknown" when built outside a git checkout. Defined in a
// file generated at build time (cmake/write_build_version.cmake).
std::string_view build_version();

}  // namespace dtrun
