// Files for tests that run real processes: a fresh temporary folder, and
// a file's whole text.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace dtrun::agent::testing {

// A new folder /tmp/<prefix>.XXXXXX (left behind for a look after a failure).
inline std::string make_temp_dir(const std::string& prefix) {
  std::string name = "/tmp/" + prefix + ".XXXXXX";
  REQUIRE(::mkdtemp(name.data()) != nullptr);
  return name;
}

// The file's contents; empty when it cannot be read.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace dtrun::agent::testing
