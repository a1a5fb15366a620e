// What kind of failure ended a round (docs/agent.md, "Failure classes"):
// one word the failure summary, the event log, `dtrun status`, /metrics
// and --no-restart-on share.
//
// A worker's failure is classified on the node where it ran, from what
// that node can prove: the signal that ended it and whether dtrun sent it,
// the kernel's own OOM-kill count for the worker's memory cgroup, its
// error file and its redirected stderr. A round that ended for another
// reason (a node lost, a node that left) has a class too, so every
// incident has one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/record/failure_class.h"

namespace dtrun::agent {

// The classes themselves, their names and tags live below the agent and
// the rendezvous (rendezvous/record/failure_class.h): a round record
// carries one.
using records::class_name;
using records::class_names;
using records::class_tag;
using records::failure_class;
using records::is_worker_failure;
using records::parse_class;

// What is known of one failed worker.
struct failure_evidence {
  int exit_code = 0;
  int signal = 0;               // 0: it exited
  bool oom_killed = false;      // its memory cgroup's oom_kill count rose meanwhile
  std::string hang;             // dtrun killed it after a hang
  std::string watchdog;         // the file-timer watchdog killed it
  std::string message;          // its error file's message
  std::string traceback;        // its error file's traceback
  std::vector<std::string> log_tail;  // its redirected stderr's last lines
};

failure_class classify(const failure_evidence& e);

// The Python exception's type name ("TypeError", "OutOfMemoryError"; a
// dotted name is cut to its last part), from the error file's message
// ("TypeError: ..." as torch's @record writes it) or else the last line
// of a traceback in stderr. Empty when none is known.
std::string exception_type(const failure_evidence& e);

// Whether `text` is a collective's watchdog or timeout message: NCCL's
// "Watchdog caught collective operation timeout", gloo's "Timed out
// waiting ... for recv/send operation".
bool says_collective_timeout(std::string_view text);

// Whether another node's loss can cause a failure like this one (issue 49):
// a collective's timeout, or the words a collective or the workers' store
// says when a peer is gone (gloo's "Connection closed by peer", a reset or
// broken connection, NCCL's remote error, a communicator aborted), in the
// error file, its traceback or the stderr tail, exited or aborted
// (SIGABRT: NCCL's error handling). Never for a failure dtrun caused (a
// hang, the watchdog), the OOM killer, another signal, or a plain
// exception: those are decided at once. The agent holds the restart
// decision of such a failure until the rendezvous's departure bound
// (docs/agent.md, "A failure a departure explains").
bool lost_peer_can_cause(const failure_evidence& e);

}  // namespace dtrun::agent
