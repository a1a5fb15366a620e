// The message of the usage_error a call throws, for tests that compare the
// exact words a user sees.
#pragma once

#include <string>

#include "rendezvous/base/usage_error.h"

namespace dtrun::launcher::testing {

// The usage_error's text, or "(no error)" when the call throws none.
std::string usage_error_of(auto&& call) {
  try {
    call();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace dtrun::launcher::testing
