// dtrun installed into a Python environment starts its workers with that
// environment's interpreter, as torchrun does with sys.executable.
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "launcher/config/installed_python.h"

using dtrun::launcher::python_beside;
namespace fs = std::filesystem;

namespace {

// A temporary <env>/bin holding a dtrun file, removed at the end.
class fake_env {
 public:
  fake_env() {
    std::string pattern = (fs::temp_directory_path() / "dtrun-env-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    root_ = pattern;
    fs::create_directories(root_ / "bin");
    file("bin/dtrun", 0755);
  }
  ~fake_env() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fake_env(const fake_env&) = delete;
  fake_env& operator=(const fake_env&) = delete;

  void file(const std::string& relative, mode_t mode) const {
    std::ofstream(root_ / relative) << "x";
    REQUIRE(::chmod((root_ / relative).c_str(), mode) == 0);
  }
  fs::path path(const std::string& relative) const { return root_ / relative; }
  fs::path dtrun() const { return root_ / "bin" / "dtrun"; }

 private:
  fs::path root_;
};

}  // namespace

TEST_CASE("a venv's python3 beside dtrun is its interpreter") {
  fake_env env;
  env.file("pyvenv.cfg", 0644);
  env.file("bin/python3", 0755);
  CHECK(python_beside(env.dtrun()) == env.path("bin/python3").string());
}

TEST_CASE("a conda environment's python is found when it has no python3") {
  fake_env env;
  fs::create_directory(env.path("conda-meta"));
  env.file("bin/python", 0755);
  CHECK(python_beside(env.dtrun()) == env.path("bin/python").string());
}

TEST_CASE("outside a Python environment dtrun keeps python3 from PATH") {
  fake_env env;  // like /usr/bin: a python3 beside dtrun, but no pyvenv.cfg
  env.file("bin/python3", 0755);
  CHECK(python_beside(env.dtrun()) == "");
}

TEST_CASE("an environment without a runnable interpreter is not used") {
  fake_env env;
  env.file("pyvenv.cfg", 0644);
  CHECK(python_beside(env.dtrun()) == "");
  env.file("bin/python3", 0644);  // not executable
  CHECK(python_beside(env.dtrun()) == "");
}
