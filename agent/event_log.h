// The agent's machine-readable event log (--event-log FILE, or '-' for
// stderr): one JSON object per line,
//
//   {"time": "2026-11-22T20:31:04.123Z", "event": "worker_exited",
//    "host": "h1", "agent_pid": 4242, ...fields}
//
// Each line goes out in one write() on a descriptor opened with O_APPEND,
// so agents (and nodes on a shared file system that honours O_APPEND)
// sharing one file never interleave their lines. The events and their
// fields are listed in docs/agent.md.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

// "2026-11-22T20:31:04.123Z": UTC, milliseconds.
std::string iso8601_utc_ms(std::chrono::system_clock::time_point t);

// One event as its line (with the trailing newline). Text that is not
// valid UTF-8 (a worker's output) is replaced, never thrown about.
std::string format_event_line(std::chrono::system_clock::time_point time, std::string_view event,
                              const nlohmann::ordered_json& identity,
                              const nlohmann::ordered_json& fields);

class event_log {
 public:
  // A log that writes nothing (no --event-log).
  event_log() = default;
  ~event_log();
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;

  // Opens `path` for appending ("-": stderr). Throws std::system_error
  // with a message naming the file when it cannot be opened.
  void open(const std::string& path);

  bool enabled() const { return fd_ >= 0; }

  // Fields every line carries (host, agent pid), after time and event.
  void set_identity(nlohmann::ordered_json identity) { identity_ = std::move(identity); }

  // Writes one event stamped now. A failed write is ignored: the log must
  // never stop the job.
  void emit(std::string_view event, const nlohmann::ordered_json& fields = nlohmann::ordered_json::object()) const;

 private:
  int fd_ = -1;
  bool owned_ = false;
  nlohmann::ordered_json identity_ = nlohmann::ordered_json::object();
};

}  // namespace dtrun::agent
