// The error file a worker may leave at TORCHELASTIC_ERROR_FILE (torch's
// @record decorator writes it when the worker dies of an exception).
//
// Two shapes exist in torch:
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"},
//                "errorCode": 1}}                     (errorCode: only in copies a parent rewrote)
//   {"message": "...", "timestamp": 1700000000}       (the "new" flat shape)
// torch's @record opens the file with "w": a file left from before is
// overwritten, never appended to. dtrun removes any file at that path
// before it starts the worker, so what it reads is this worker's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

// Bounds, so one worker's file cannot flood the summary or the store.
struct error_file_limits {
  std::size_t max_file_bytes = 4 * 1024 * 1024;  // larger files are not parsed
  std::size_t max_message_bytes = 2 * 1024;      // head kept
  std::size_t max_traceback_bytes = 4 * 1024;    // tail kept (the innermost frames)
};

struct error_file_contents {
  std::string message;    // "ValueError: boom 42"
  std::string traceback;  // py_callstack, "" when absent
  bool truncated = false; // the message or traceback was cut to the limits
  std::optional<std::int64_t> timestamp;  // seconds since the epoch, the worker's clock
  std::optional<int> error_code;          // message.errorCode when present
  nlohmann::json extra_info = nlohmann::json::object();  // other extraInfo keys
};

// What reading the file at a path gave.
struct error_file_result {
  bool present = false;                      // a file existed at the path
  std::optional<error_file_contents> contents;  // parsed, when present and valid
  std::string problem;  // why a present file could not be used ("not JSON: ...")
};

// Parses a file's text. nullopt with `problem` set when it is not JSON or
// not in either shape.
std::optional<error_file_contents> parse_error_file(std::string_view text, std::string& problem,
                                                    const error_file_limits& limits = {});

// Reads and parses the file at `path` (bounded by limits.max_file_bytes).
error_file_result load_error_file(const std::string& path, const error_file_limits& limits = {});

// Just the message: nullopt when the file is missing or unusable.
std::optional<std::string> read_error_file(const std::string& path);

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary,
// keeping the head (keep_tail=false) or the tail; nothing is added.
std::string truncate_utf8(std::string_view text, std::size_t max_bytes, bool keep_tail);

}  // namespace dtrun::agent
