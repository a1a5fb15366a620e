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
#include <functional>
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

  // Where the one warning about a failed write goes (default: a
  // "dtrun: warning: ..." line on stderr).
  void set_warning_sink(std::function<void(const std::string&)> sink) {
    warn_ = std::move(sink);
  }

  bool enabled() const { return fd_ >= 0; }

  // Fields every line carries (host, agent pid), after time and event.
  void set_identity(nlohmann::ordered_json identity) { identity_ = std::move(identity); }

  // Writes one event stamped now. The first line is the probe of the
  // file: when it cannot be written (a full disk, /dev/full, a read-only
  // mount behind a writable descriptor) emit throws std::system_error
  // naming the file, so the run fails at its start, before any worker.
  // A later failure does not stop the job: it is reported once through
  // the warning sink and the events after it may be lost.
  void emit(std::string_view event, const nlohmann::ordered_json& fields = nlohmann::ordered_json::object()) const;

 private:
  void write_failed(int error) const;

  int fd_ = -1;
  bool owned_ = false;
  std::string path_;
  mutable bool wrote_ = false;   // a whole line went out
  mutable bool warned_ = false;  // the one warning was given
  std::function<void(const std::string&)> warn_;
  nlohmann::ordered_json identity_ = nlohmann::ordered_json::object();
};

}  // namespace dtrun::agent
