// Round records: the facts nodes tell each other about a round's end, as
// values (docs/design.md, "Round records"; docs/rendezvous.md, the key
// table). A failure, a refusal by the restart policy, a node that left,
// was lost or went silent, a stop by a signal, a newcomer, the job's
// finish: one kind each, with the data the decisions need (who, which
// worker, which class, refused or not) and the human words kept as data.
//
// Written to the store (r/<r>/over, failed, stopped, a node's will) by
// to_text() and read back by record_from_text() only: versioned JSON, so
// an agent that meets another dtrun's writing (an older dtrun's sentence,
// a newer version) knows it and refuses instead of misreading it.
// describe() renders the sentence users read; nothing parses it back.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/record/failure_class.h"

namespace dtrun::records {

// The record format this dtrun writes and reads. 0 is the format before
// records: English sentences (dtrun up to issue 47).
inline constexpr int record_version = 1;

enum class record_kind {
  worker_failed,  // a node's worker failed (report_failure): a restart is counted
  job_failed,     // a node failed the job: restarts used up, refused, cannot start
  node_lost,      // its connection closed with its will standing
  node_silent,    // its ring predecessor saw it stop beating
  node_left,      // it left on its own: unhealthy, preempted, quarantined
  job_stopped,    // a person stopped the job (a signal)
  newcomer,       // a node is waiting to join
  finished,       // every node finished (the exit barrier's release)
  store_lost,     // the rendezvous store went away (told locally, never stored)
  foreign,        // a value this dtrun cannot read (another version's)
};

struct round_record {
  record_kind kind = record_kind::newcomer;
  int node = -1;                       // the group rank it is about; -1: none
  std::string host;                    // node_left, job_stopped
  std::string addr;                    // node_lost: its advertised address
  std::optional<int> rank;             // the failed worker's global rank
  std::optional<failure_class> klass;  // the failure's class (node_left: health or preemption)
  std::string exception_type;          // with klass exception: "TypeError"
  std::optional<int> exit_code;        // the failed worker's exit code
  std::optional<int> signal;           // ... or the signal that ended it
  bool refused = false;                // job_failed: the restart policy refused a restart
  // klass hang: the section (--section-timeouts) the worker overstayed;
  // empty for a job-wide hang (--hang-timeout).
  std::string section;
  // The human words: a worker's end ("worker rank 3 exited with code 1"),
  // a health check's reason, a stop's signal, a refusal's line; for
  // foreign, the value as found. Shown, never parsed.
  std::string detail;
  // foreign: the record format of the value found (0: a sentence).
  int version = record_version;
};

// A node's departure, the failures, and what a round's end means.
bool is_departure(const round_record& r);  // node_lost, node_silent, node_left
bool is_failure(const round_record& r);    // worker_failed, job_failed
// The group rank a departure names as gone; nullopt for every other kind.
std::optional<int> departed_rank(const round_record& r);
// The class of the incident a round's end opens (failure_class.h).
failure_class round_end_class(const round_record& r);

// The sentence users read, as dtrun wrote it before records:
// "node 1: worker rank 3 exited with code 1 [exception:TypeError]",
// "node 2 (10.0.0.3) was lost", "job stopped on node 1 (host h2) by
// SIGINT (Ctrl-C there)".
std::string describe(const round_record& r);
// job_stopped: who stopped it, "node 1 (host h2) by SIGINT (Ctrl-C there)".
std::string stopped_by(const round_record& r);

// The store's text (versioned JSON), and back. record_from_text never
// throws: a value that is no record of this version (an older dtrun's
// sentence, a newer version, corrupt text) comes back as a `foreign`
// record holding the text as found and the version it carries (0 for
// anything that is not a versioned JSON object).
std::string to_text(const round_record& r);
round_record record_from_text(std::string_view text);

// Refusing a job of mixed versions (docs/rendezvous.md, "Mixed
// versions"): one line naming both record formats; `what` says where the
// other version was met ("a node of round 3 (host h2)").
std::string version_mismatch_line(int theirs, std::string_view what);

// The constructors the writers use.
round_record node_lost(int node, std::string addr);
round_record node_silent(int node);
round_record newcomer();
// A node that leaves on its own: `c` health or preemption, `why` its
// words; the rendezvous handler sets its node and host (leave_job).
round_record leaving(failure_class c, std::string why);
round_record finished();

}  // namespace dtrun::records
