// The error of a command line dtrun cannot run. Its own header so that the
// number parsing and the other checks below the command line can throw it
// without including the command line (launcher/cli/cli.h).
#pragma once

#include <stdexcept>

namespace dtrun {

// A command line dtrun cannot run; what() is one line saying what to do.
// dtrun exits 2 for these.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dtrun
