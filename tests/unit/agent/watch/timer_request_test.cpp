#include <csignal>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/watch/file_timer.h"
#include "agent/watch/timer_request.h"

using namespace dtrun::agent;

namespace {

std::optional<timer_request> parse(const std::string& line, std::string* why = nullptr) {
  std::string error;
  auto r = parse_timer_request(line, error);
  if (why != nullptr) *why = error;
  if (!r) CHECK_FALSE(error.empty());
  return r;
}

std::vector<timer_line_splitter::line> split(timer_line_splitter& s, std::vector<std::string> chunks) {
  std::vector<timer_line_splitter::line> out;
  for (const auto& c : chunks) s.feed(c, out);
  return out;
}

}  // namespace

TEST_CASE("a torch FileTimerClient acquire request is read") {
  // json.dumps of FileTimerRequest.to_json (torch 1.13 and 2.x alike).
  auto r = parse(R"({"version": 1, "pid": 4242, "scope_id": "/x/train.py#12", )"
                 R"("expiration_time": 1700000000.25, "signal": 9})");
  REQUIRE(r);
  CHECK(r->pid == 4242);
  CHECK(r->scope_id == "/x/train.py#12");
  CHECK(r->expiration_time == 1700000000.25);
  CHECK(r->signal == SIGKILL);
  CHECK_FALSE(r->is_release());
}

TEST_CASE("a negative expiration time is a release") {
  auto r = parse(R"({"version": 1, "pid": 7, "scope_id": "s", "expiration_time": -1, "signal": 0})");
  REQUIRE(r);
  CHECK(r->is_release());
}

TEST_CASE("an integer expiration time and a missing version are accepted") {
  auto r = parse(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": 15})");
  REQUIRE(r);
  CHECK(r->expiration_time == 5.0);
  CHECK(r->signal == SIGTERM);
}

TEST_CASE("a signal of zero or below sets a timer that never kills") {
  auto r = parse(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": -3})");
  REQUIRE(r);
  CHECK(r->signal == 0);
}

TEST_CASE("malformed requests are refused with a reason") {
  std::string why;
  CHECK_FALSE(parse("not json", &why));
  CHECK(why == "not a JSON object");
  CHECK_FALSE(parse("[1, 2]"));
  CHECK_FALSE(parse(std::string(3000, '[')));
  CHECK_FALSE(parse(R"({"pid": 7, "scope_id": "s", "expiration_time": 5})", &why));
  CHECK(why.find("signal") != std::string::npos);
  CHECK_FALSE(parse(R"({"pid": "7", "scope_id": "s", "expiration_time": 5, "signal": 9})"));
  CHECK_FALSE(parse(R"({"pid": 7.5, "scope_id": "s", "expiration_time": 5, "signal": 9})"));
  CHECK_FALSE(parse(R"({"pid": 7, "scope_id": 3, "expiration_time": 5, "signal": 9})"));
  CHECK_FALSE(parse(R"({"pid": 7, "scope_id": "s", "expiration_time": "5", "signal": 9})"));
  CHECK_FALSE(parse(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": 9.0})"));
}

TEST_CASE("pids and signals out of range are refused") {
  std::string why;
  for (const char* pid : {"0", "-1", "2147483648", "18446744073709551615", "-9223372036854775808"}) {
    INFO(pid);
    CHECK_FALSE(parse(std::string(R"({"pid": )") + pid +
                          R"(, "scope_id": "s", "expiration_time": 5, "signal": 9})",
                      &why));
    CHECK(why == "\"pid\" is not a process id");
  }
  for (const char* sig : {"65", "1000", "18446744073709551615"}) {
    INFO(sig);
    CHECK_FALSE(parse(std::string(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": )") +
                      sig + "}"));
  }
}

TEST_CASE("an over-long scope id is refused") {
  std::string scope(max_scope_id + 1, 'a');
  CHECK_FALSE(parse(R"({"pid": 7, "scope_id": ")" + scope + R"(", "expiration_time": 5, "signal": 9})"));
  scope.pop_back();
  CHECK(parse(R"({"pid": 7, "scope_id": ")" + scope + R"(", "expiration_time": 5, "signal": 9})"));
}

TEST_CASE("lines split over reads are joined and a trailing fragment waits") {
  timer_line_splitter s(16);
  auto lines = split(s, {"ab", "c\nde", "f\n", "gh"});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].text == "abc");
  CHECK(lines[1].text == "def");
  CHECK_FALSE(lines[0].overlong);
  lines = split(s, {"\n"});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].text == "gh");
}

TEST_CASE("an overlong line is dropped whole and the next line is read") {
  timer_line_splitter s(8);
  auto lines = split(s, {"12345", "67890", std::string(100000, 'x'), "\nok\n", "12345678\n"});
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].overlong);
  CHECK(lines[0].text.empty());
  CHECK(lines[1].text == "ok");
  CHECK_FALSE(lines[1].overlong);
  CHECK(lines[2].text == "12345678");  // exactly max_line is fine
}

TEST_CASE("the watchdog is on only for TORCHELASTIC_ENABLE_FILE_TIMER=1") {
  CHECK_FALSE(file_timer_from_env({}).enabled);
  CHECK_FALSE(file_timer_from_env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}}).enabled);
  CHECK_FALSE(file_timer_from_env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}).enabled);
  auto c = file_timer_from_env(
      {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/tmp/p"}});
  CHECK(c.enabled);
  CHECK(c.path == "/tmp/p");
  CHECK(file_timer_from_env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}).path.empty());
}

TEST_CASE("hostile numbers in a request are refused and never wrapped") {
  auto line = [](const std::string& pid, const std::string& when, const std::string& sig) {
    return R"({"pid": )" + pid + R"(, "scope_id": "s", "expiration_time": )" + when +
           R"(, "signal": )" + sig + "}";
  };
  std::string why;
  // Overflowing floats are a JSON error for nlohmann: no deadline.
  CHECK_FALSE(parse(line("42", "1e400", "9"), &why));
  CHECK(why == "not a JSON object");
  CHECK_FALSE(parse(line("42", "-1e400", "9")));
  CHECK_FALSE(parse(line("42", "NaN", "9")));
  // pid_t is 32 bits: 2^31 and above are no process.
  CHECK_FALSE(parse(line("2147483648", "1", "9")));
  CHECK_FALSE(parse(line("-9223372036854775808", "1", "9")));
  CHECK_FALSE(parse(line("true", "1", "9")));
  CHECK_FALSE(parse(line("42.0", "1", "9")));
  // A signal below INT64_MIN reads as a float: refused, not wrapped.
  CHECK_FALSE(parse(line("42", "1", "-9223372036854775809")));
  auto r = parse(line("42", "1", "-9223372036854775808"));
  REQUIRE(r);
  CHECK(r->signal == 0);
  // A key given twice: the last one counts (nlohmann), still checked.
  CHECK_FALSE(parse(R"({"pid": 42, "pid": -1, "scope_id": "s", "expiration_time": 1, "signal": 9})"));
}
