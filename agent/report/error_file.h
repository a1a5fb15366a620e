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
//
// The worker controls what is at the path, so reading it must be safe on
// the agent's one event loop: only a regular file is read (a FIFO would
// block the read, a directory fails it, a link to /dev/zero never ends);
// at most max_file_bytes + 1 bytes are read whatever st_size says (the
// file may grow); a symbolic link is refused, not followed (torch's @record
// creates a plain file, so a link there is never the worker's report, and
// following one would open whatever it names: a device, a FIFO, a file
// of someone else's that would then be printed and published to every
// node). The JSON is parsed without exceptions, its nesting is bounded
// (dumping a deeply nested value would recurse off the stack) and every
// field is checked for its type. The text is kept as the worker wrote
// it: whoever prints it escapes it (dtrun::printable).
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
  int max_depth = 32;  // deeper JSON is refused (torch's files are 3 deep)
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
  bool present = false;                      // something existed at the path
  std::optional<error_file_contents> contents;  // parsed, when present and valid
  // Why a present file could not be used, e.g. "not a regular file (a
  // FIFO)", "not valid JSON", "cannot be read: Permission denied".
  std::string problem;
};

// `text` parsed as JSON, without exceptions: discarded (is_discarded())
// when it is not JSON; `too_deep` set, and discarded, when an array or
// object nests deeper than `max_depth`. For any JSON from outside (error
// files, records read from the store): copying or dumping a value
// recurses, so depth must be bounded before either.
nlohmann::json parse_json_bounded(std::string_view text, int max_depth, bool& too_deep);

// Parses a file's text. nullopt with `problem` set when it is not JSON,
// nested deeper than limits.max_depth, or not in either shape. Never
// throws on any input.
std::optional<error_file_contents> parse_error_file(std::string_view text, std::string& problem,
                                                    const error_file_limits& limits = {});

// Reads and parses the file at `path`: a regular file only, not through a
// symbolic link, at most limits.max_file_bytes. Never blocks on what is at
// the path and never throws; anything unusable is a `problem`.
error_file_result load_error_file(const std::string& path, const error_file_limits& limits = {});

// Just the message: nullopt when the file is missing or unusable.
std::optional<std::string> read_error_file(const std::string& path);

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary,
// keeping the head (keep_tail=false) or the tail; nothing is added.
std::string truncate_utf8(std::string_view text, std::size_t max_bytes, bool keep_tail);

}  // namespace dtrun::agent
