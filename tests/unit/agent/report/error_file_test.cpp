#include <unistd.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/report/error_file.h"

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
using dtrun::agent::error_file_result;
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
  // Appended, not `std::string(2048, ' ') + "..."`: with the precompiled
  // headers GCC 12 at -O2 reports a false -Warray-bounds inside libstdc++
  // for that temporary (the same family as GCC PR 105329).
  std::string padded(2048, ' ');
  padded += R"({"message": "late"})";
  std::string path = write_temp(padded);
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

// What is at the error-file path is the worker's choice: whatever it is,
// reading it returns at once, names what was wrong and never throws.
namespace {

struct scratch_dir {
  std::string path;
  scratch_dir() {
    char pattern[] = "/tmp/dtrun_error_dir_XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const char* name) const { return path + "/" + name; }
};

}  // namespace

TEST_CASE("a FIFO at the path is refused without blocking") {
  scratch_dir dir;
  std::string path = dir.file("error.json");
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  // With no writer, an open or a read of this FIFO would block forever.
  auto result = load_error_file(path);
  CHECK(result.present);
  CHECK_FALSE(result.contents);
  CHECK(result.problem == "not a regular file (a FIFO)");
}

TEST_CASE("a directory at the path is refused without an exception") {
  scratch_dir dir;
  std::string path = dir.file("error.json");
  REQUIRE(::mkdir(path.c_str(), 0700) == 0);
  error_file_result result;
  REQUIRE_NOTHROW(result = load_error_file(path));
  CHECK(result.present);
  CHECK_FALSE(result.contents);
  CHECK(result.problem == "not a regular file (a directory)");
}

TEST_CASE("a symbolic link is refused even to a regular file") {
  scratch_dir dir;
  std::string to_zero = dir.file("zero.json");
  REQUIRE(::symlink("/dev/zero", to_zero.c_str()) == 0);
  auto zero = load_error_file(to_zero);  // never ends if followed and read
  CHECK(zero.present);
  CHECK_FALSE(zero.contents);
  CHECK(zero.problem == "not a regular file (a symbolic link)");

  std::string real = dir.file("real.json");
  std::ofstream(real) << R"({"message": "from elsewhere"})";
  std::string to_real = dir.file("error.json");
  REQUIRE(::symlink(real.c_str(), to_real.c_str()) == 0);
  auto linked = load_error_file(to_real);
  CHECK_FALSE(linked.contents);
  CHECK(linked.problem == "not a regular file (a symbolic link)");
  CHECK(load_error_file(real).contents);  // the same file, named directly, is read

  std::string dangling = dir.file("dangling.json");
  REQUIRE(::symlink(dir.file("nothing").c_str(), dangling.c_str()) == 0);
  CHECK(load_error_file(dangling).problem == "not a regular file (a symbolic link)");
}

TEST_CASE("a huge sparse file is refused after reading one byte past the limit") {
  scratch_dir dir;
  std::string path = dir.file("error.json");
  {
    std::ofstream out(path);
    out << R"({"message": "x"})";
  }
  // 1 TiB by st_size: nothing may be sized or read by it.
  REQUIRE(::truncate(path.c_str(), off_t{1} << 40) == 0);
  error_file_limits small;
  small.max_file_bytes = 4096;
  auto result = load_error_file(path, small);
  CHECK(result.present);
  CHECK_FALSE(result.contents);
  CHECK(result.problem == "more than the 4096 bytes dtrun reads");
}

TEST_CASE("an unreadable file is named with the reason") {
  scratch_dir dir;
  std::string path = dir.file("error.json");
  std::ofstream(path) << R"({"message": "secret"})";
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  auto result = load_error_file(path);
  if (::geteuid() == 0) {
    WARN("running as root: permissions do not stop the read, only the rest is checked");
    CHECK(result.contents);
  } else {
    CHECK(result.present);
    CHECK_FALSE(result.contents);
    CHECK(result.problem == "cannot be read: Permission denied");
  }
}

TEST_CASE("fields of the wrong type never throw and are shown or ignored") {
  std::string problem;
  auto number = parse_error_file(R"({"message": 42, "timestamp": "soon"})", problem);
  REQUIRE(number);
  CHECK(number->message == "42");
  CHECK_FALSE(number->timestamp);
  auto object = parse_error_file(
      R"({"message": {"message": {"a": [1, 2]}, "errorCode": "x", "extraInfo": {"py_callstack": 7, "timestamp": 1e300}}})",
      problem);
  REQUIRE(object);
  CHECK(object->message == R"({"a":[1,2]})");
  CHECK(object->traceback == "7");
  CHECK_FALSE(object->error_code);
  CHECK_FALSE(object->timestamp);  // a double out of the int64 range is not cast
  auto big = parse_error_file(
      R"({"message": {"message": "m", "errorCode": 99999999999, "extraInfo": "not an object"}})",
      problem);
  REQUIRE(big);
  CHECK_FALSE(big->error_code);  // does not fit an int
  CHECK(parse_error_file(R"({"message": "m", "timestamp": 18446744073709551615})", problem));
  CHECK_FALSE(parse_error_file(R"("just a string")", problem));
  CHECK(problem == "no \"message\" field");
  CHECK_FALSE(parse_error_file("", problem));
  CHECK(problem == "not valid JSON");
}

TEST_CASE("deeply nested JSON is refused before anything recurses over it") {
  std::string bomb = R"({"message": )" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  std::string problem;
  CHECK_FALSE(parse_error_file(bomb, problem));
  CHECK(problem == "JSON nested deeper than 32 levels");
  // Unclosed, as a file cut short would be.
  CHECK_FALSE(parse_error_file(R"({"message": )" + std::string(1'000'000, '{'), problem));
  scratch_dir dir;
  std::string path = dir.file("error.json");
  std::ofstream(path) << bomb;
  auto result = load_error_file(path);
  CHECK_FALSE(result.contents);
  CHECK(result.problem == "JSON nested deeper than 32 levels");
}

TEST_CASE("invalid UTF-8 is not JSON and control characters are kept for the printer") {
  std::string problem;
  CHECK_FALSE(parse_error_file("{\"message\": \"bad \xff\xfe byte\"}", problem));
  CHECK(problem == "not valid JSON");
  // Escapes in JSON give the raw characters; dtrun::printable escapes
  // them where they are printed (failure_report_test).
  auto c = parse_error_file(R"({"message": "\u001b[2K\rFAKE dtrun: job succeeded\n"})", problem);
  REQUIRE(c);
  CHECK(c->message == "\x1b[2K\rFAKE dtrun: job succeeded\n");
}
