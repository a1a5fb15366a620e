// What kind of failure ended a round (docs/agent.md, "Failure classes"):
// one word the failure summary, the event log, `dtrun status`, /metrics,
// --no-restart-on and the round records share. The classes live here,
// below the rendezvous and the agent, because a round record carries one
// (round_record.h); how a worker's failure is classified is the agent's
// (agent/spec/failure_class.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::records {

enum class failure_class {
  exception,           // exited non-zero with a traceback or an error file
  exit,                // exited non-zero, nothing else known
  signal,              // killed by a signal dtrun did not send
  oom_kill,            // killed by the kernel's OOM killer (its cgroup's count rose)
  collective_timeout,  // the NCCL or gloo watchdog gave up on a collective
  hang,                // dtrun's hang detector (--hang-timeout) killed it
  watchdog,            // torch's file-timer watchdog killed it
  node,                // a node was lost
  health,              // a node left the job unhealthy
  membership,          // a node joined (not a fault)
  preemption,          // a node left the job to be preempted
};

// A class a worker's failure can have (exception ... watchdog); the
// others (node, health, membership, preemption) end a round without the
// training failing.
bool is_worker_failure(failure_class c);

// "oom-kill", "collective-timeout", ...: the names users write.
std::string_view class_name(failure_class c);
std::optional<failure_class> parse_class(std::string_view name);
// Every class name, in the enum's order (for help texts and metrics).
const std::vector<std::string_view>& class_names();

// "[exception:TypeError]" / "[oom-kill]": how a failure's class is shown
// at the end of the sentence that describes it (describe(), the event
// log's `caused`). Rendered only: nothing reads it back.
std::string class_tag(failure_class c, const std::string& exception);

}  // namespace dtrun::records
