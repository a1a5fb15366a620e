#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

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

using dtrun::agent::error_file_limits;
using dtrun::agent::load_error_file;
using dtrun::agent::parse_error_file;

TEST_CASE("torch's nested shape gives the message, traceback, timestamp and extra info") {
  std::string problem;
  auto c = parse_error_file(
      R"({"message": {"message": "ValueError: boom 42", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"w.py\", line 3, in main\nValueError: boom 42\n", "timestamp": "1700000000", "gpu": "0"}, "errorCode": 7}})",
      problem);
  REQUIRE(c);
  CHECK(c->message == "ValueError: boom 42");
  CHECK(c->traceback.find("File \"w.py\", line 3, in main") != std::string::npos);
  CHECK(c->timestamp == std::optional<std::int64_t>(1700000000));
  CHECK(c->error_code == std::optional<int>(7));
  CHECK(c->extra_info["gpu"] == "0");
  CHECK_FALSE(c->truncated);
}

TEST_CASE("the flat shape gives the message and a numeric timestamp") {
  std::string problem;
  auto c = parse_error_file(R"({"message": "plain", "timestamp": 1700000001})", problem);
  REQUIRE(c);
  CHECK(c->message == "plain");
  CHECK(c->traceback.empty());
  CHECK(c->timestamp == std::optional<std::int64_t>(1700000001));
}

TEST_CASE("bad error files say what is wrong with them") {
  std::string problem;
  CHECK_FALSE(parse_error_file("{not json", problem));
  CHECK(problem == "not valid JSON");
  CHECK_FALSE(parse_error_file(R"({"msg": "x"})", problem));
  CHECK(problem.find("message") != std::string::npos);
  CHECK_FALSE(parse_error_file(R"({"message": {"extraInfo": {}}})", problem));
  // A timestamp that is not a number is ignored, the rest is kept.
  auto c = parse_error_file(R"({"message": {"message": "m", "extraInfo": {"timestamp": "soon"}}})",
                            problem);
  REQUIRE(c);
  CHECK_FALSE(c->timestamp);
}

TEST_CASE("huge messages and tracebacks are cut to the limits, keeping the innermost frames") {
  std::string frames;
  for (int i = 0; i < 5000; ++i) frames += "  File \"deep.py\", line " + std::to_string(i) + "\n";
  frames += "RecursionError: innermost\n";
  nlohmann::json doc{{"message",
                      {{"message", std::string(10000, 'x')},
                       {"extraInfo", {{"py_callstack", frames}, {"timestamp", "1"}}}}}};
  std::string path = write_temp(doc.dump());
  auto result = load_error_file(path);
  REQUIRE(result.present);
  REQUIRE(result.contents);
  const auto& c = *result.contents;
  error_file_limits limits;
  CHECK(c.truncated);
  CHECK(c.message.size() <= limits.max_message_bytes + 4);
  CHECK(c.traceback.size() <= limits.max_traceback_bytes + 32);
  CHECK(c.traceback.rfind("... (traceback truncated)\n", 0) == 0);
  CHECK(c.traceback.find("RecursionError: innermost") != std::string::npos);
  CHECK(c.traceback.find("line 0\n") == std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("a file over the size limit is not parsed, and says why") {
  std::string path = write_temp(std::string(2048, ' ') + R"({"message": "late"})");
  error_file_limits small;
  small.max_file_bytes = 1024;
  auto result = load_error_file(path, small);
  CHECK(result.present);
  CHECK_FALSE(result.contents);
  CHECK(result.problem.find("more than the 1024") != std::string::npos);
  CHECK_FALSE(load_error_file("/nonexistent/error.json").present);
  std::remove(path.c_str());
}

TEST_CASE("truncation never splits a UTF-8 character") {
  std::string text = "\xc3\xa9\xc3\xa9\xc3\xa9";  // three two-byte characters
  CHECK(dtrun::agent::truncate_utf8(text, 3, false) == "\xc3\xa9");
  CHECK(dtrun::agent::truncate_utf8(text, 3, true) == "\xc3\xa9");
  CHECK(dtrun::agent::truncate_utf8(text, 10, true) == text);
}
