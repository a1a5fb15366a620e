#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/error_file.h"

using dtrun::agent::read_error_file;

namespace {

std::string write_temp(const std::string& content) {
  char path[] = "/tmp/dtrun_error_file_XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << content;
  return path;
}

}  // namespace

TEST_CASE("error files in torch's nested shape are read") {
  std::string path = write_temp(
      R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"timestamp": "1"}}})");
  CHECK(read_error_file(path) == std::optional<std::string>("RuntimeError: boom"));
  std::remove(path.c_str());
}

TEST_CASE("error files with a plain message are read") {
  std::string path = write_temp(R"({"message": "plain"})");
  CHECK(read_error_file(path) == std::optional<std::string>("plain"));
  std::remove(path.c_str());
}

TEST_CASE("missing or malformed error files give nothing") {
  CHECK_FALSE(read_error_file("/nonexistent/error.json"));
  std::string path = write_temp("{not json");
  CHECK_FALSE(read_error_file(path));
  std::remove(path.c_str());
}
