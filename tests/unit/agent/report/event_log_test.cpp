#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/report/agent_log.h"
#include "agent/report/event_log.h"

using namespace dtrun::agent;
using ojson = nlohmann::ordered_json;

TEST_CASE("timestamps are ISO 8601 UTC with milliseconds") {
  using namespace std::chrono;
  CHECK(iso8601_utc_ms(system_clock::time_point(milliseconds(1700000000123))) ==
        "2023-11-14T22:13:20.123Z");
  CHECK(iso8601_utc_ms(system_clock::time_point(milliseconds(5))) == "1970-01-01T00:00:00.005Z");
}

TEST_CASE("an event line is one JSON object: time and event first, text escaped") {
  using namespace std::chrono;
  std::string line = format_event_line(
      system_clock::time_point(milliseconds(1700000000123)), "worker_exited",
      ojson{{"host", "h1"}, {"agent_pid", 7}},
      ojson{{"message", "quote \" newline \n tab \t"}, {"bad_utf8", "\xff\xfe"}, {"signal", nullptr}});
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);  // one line, whatever the text
  CHECK(line.rfind(R"({"time":"2023-11-14T22:13:20.123Z","event":"worker_exited","host":"h1","agent_pid":7,)", 0) == 0);
  auto j = nlohmann::json::parse(line);
  CHECK(j["message"] == "quote \" newline \n tab \t");
  CHECK(j["signal"].is_null());
  CHECK(j["bad_utf8"].get<std::string>().find("\xef\xbf\xbd") != std::string::npos);
}

TEST_CASE("the event log appends whole lines to its file") {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("dtrun_events_" + std::to_string(::getpid()) + ".jsonl")).string();
  std::filesystem::remove(path);
  {
    event_log first;
    first.open(path);
    first.set_identity(ojson{{"host", "a"}});
    event_log second;  // another agent on the same file
    second.open(path);
    first.emit("agent_started", ojson{{"n", 1}});
    second.emit("agent_started", ojson{{"n", 2}});
    first.emit("agent_exiting", ojson{{"exit_code", 0}});
  }
  std::ifstream in(path);
  std::vector<std::string> events;
  for (std::string line; std::getline(in, line);) {
    events.push_back(nlohmann::json::parse(line)["event"].get<std::string>());
  }
  CHECK(events == std::vector<std::string>{"agent_started", "agent_started", "agent_exiting"});
  std::filesystem::remove(path);
  event_log none;
  CHECK_FALSE(none.enabled());
  none.emit("ignored");  // no file: nothing happens
  event_log bad;
  CHECK_THROWS_WITH(bad.open("/nonexistent/dir/events.jsonl"),
                    Catch::Contains("cannot open the event log /nonexistent/dir/events.jsonl"));
}

TEST_CASE("an event log that cannot take its first line fails the start") {
  event_log full;
  full.open("/dev/full");  // opens fine; every write fails with ENOSPC
  CHECK_THROWS_WITH(full.emit("agent_started"),
                    Catch::Contains("cannot write the event log /dev/full (--event-log)") &&
                        Catch::Contains("No space left on device"));
}

TEST_CASE("a write failure after the first line is a warning given once") {
  // A pipe whose reader goes away: the first line fits in the pipe, the
  // next writes fail with EPIPE (SIGPIPE ignored meanwhile).
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  auto old_handler = std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> warnings;
  {
    event_log log;
    log.open("/dev/fd/" + std::to_string(fds[1]));
    log.set_warning_sink([&warnings](const std::string& line) { warnings.push_back(line); });
    log.emit("agent_started");
    ::close(fds[0]);
    log.emit("worker_started");
    log.emit("worker_exited");
  }
  std::signal(SIGPIPE, old_handler);
  ::close(fds[1]);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("cannot write the event log /dev/fd/") != std::string::npos);
  CHECK(warnings[0].find("the job goes on") != std::string::npos);
}

TEST_CASE("verbosity filters the agent's messages, never errors or the summary") {
  std::string out;
  auto sink = [&out](const std::string& text) { out += text; };
  agent_log quiet(verbosity::quiet, sink);
  quiet.info("round 0");
  quiet.debug("pid 1");
  quiet.error("worker failed");
  quiet.block("summary\n  line");
  CHECK(out == "dtrun: worker failed\ndtrun: summary\ndtrun:   line\n");
  out.clear();
  agent_log normal(verbosity::normal, sink);
  normal.info("round 0");
  normal.debug("pid 1");
  CHECK(out == "dtrun: round 0\n");
  out.clear();
  agent_log verbose(verbosity::verbose, sink);
  verbose.debug("pid 1");
  CHECK(out == "dtrun: pid 1\n");
}
