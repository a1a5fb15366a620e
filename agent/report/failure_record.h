// One failed worker, as its node saw it: the record the failure summary
// is built from, published to the other nodes through the store as JSON
// and read back from there (failure_report.h makes it, failure_hint.h
// adds what to do).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

struct failure_record {
  std::int64_t round = 0;
  std::string host;  // the node's hostname
  int node_rank = 0;
  int local_rank = 0;
  int rank = 0;
  long pid = -1;
  int exit_code = 0;
  int signal = 0;           // 0: it exited; else the signal that killed it
  std::int64_t time_ms = 0; // its agent saw it exit: ms since the epoch, that node's clock
  std::string message;      // from its error file
  std::string traceback;    // from its error file (bounded)
  std::optional<std::int64_t> error_time;  // the error file's timestamp (s, the worker's clock)
  std::string error_file;   // the file's path when the worker left one
  std::string error_file_problem;  // a file that was there but unusable, and why
  std::string log_file;     // the worker's redirected stderr, when it exists
  std::vector<std::string> log_tail;  // its last lines
  std::string watchdog;     // the file-timer watchdog killed it: which deadline
  std::string hang;         // dtrun killed it after a hang (--hang-timeout): where it was
  std::string hang_section; // ... a hang of this section (--section-timeouts)
  std::string hint;         // what to do, by cause (failure_hint.h); empty: none known
  std::string failure_class = "exit";  // failure_class.h's name for it
  std::string exception_type;          // "TypeError" when known
  // A lost peer can cause a failure like this (failure_class.h,
  // lost_peer_can_cause): its agent holds the restart decision. This
  // node's only: not in the JSON.
  bool lost_peer = false;
};

nlohmann::json to_json(const failure_record& r);
// Tolerant of missing fields (records from other versions); nullopt when
// `text` is not a JSON object.
std::optional<failure_record> failure_from_json(std::string_view text);

}  // namespace dtrun::agent
