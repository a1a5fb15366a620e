// Files for tests that run real processes: a fresh temporary folder, and
// a file's whole text.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
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

// A new folder /tmp/<prefix>.XXXXXX, removed with everything in it when
// the test ends.
struct scoped_temp_dir {
  std::filesystem::path path;
  explicit scoped_temp_dir(const std::string& prefix) : path(make_temp_dir(prefix)) {}
  ~scoped_temp_dir() { std::filesystem::remove_all(path); }
  scoped_temp_dir(const scoped_temp_dir&) = delete;
  scoped_temp_dir& operator=(const scoped_temp_dir&) = delete;
};

// Ends a process the test started and reaps it.
inline void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// The file's contents; empty when it cannot be read.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace dtrun::agent::testing
