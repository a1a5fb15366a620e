// A node's health (--node-health-check, docs/agent.md "Node health"): what
// one check found, and the interface the agent asks. The agent runs a
// check before its first join and every --node-health-check-interval while
// its workers run, never on the restart path (a check must not add the
// slowest node's check time to every restart of a large job).
//
// Single-threaded, on the agent's event loop; completion handlers do not
// throw.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dtrun::agent {

// One finding of a check: a built-in (disk, endpoint, gpu) or the command.
struct health_finding {
  std::string check;  // "command", "disk", "endpoint", "gpu", "nic", "storage"
  bool healthy = true;
  // One line: what failed and the command to check it by hand; empty when
  // healthy.
  std::string reason;
  // Whether this finding keeps the node out (the command always does; a
  // built-in only with --node-health-check=builtin, else it only warns).
  bool gating = true;
  // The command's last output lines, bounded and printable; empty for the
  // built-ins.
  std::vector<std::string> output_tail;
  // The same failure the check before reported (a port still down, a
  // storage probe still stuck): kept in the verdict and the event, not
  // said again in the agent's log, so a watch that lasts hours is one line.
  bool repeated = false;
};

struct health_verdict {
  std::vector<health_finding> findings;

  // No gating finding failed: the node may join (or stay).
  bool healthy() const {
    for (const auto& f : findings) {
      if (!f.healthy && f.gating) return false;
    }
    return true;
  }
  // The first gating failure's reason, else the first warning's, else "".
  std::string first_reason() const {
    for (const auto& f : findings) {
      if (!f.healthy && f.gating) return f.reason;
    }
    for (const auto& f : findings) {
      if (!f.healthy) return f.reason;
    }
    return {};
  }
};

// What the agent asks. The real one (node_health_checks) runs the built-ins
// and the command; the agent's unit tests script it.
class node_health_checker {
 public:
  virtual ~node_health_checker() = default;
  // Runs every configured check once and calls `done` once, on the loop,
  // never from inside check(). At most one check at a time.
  virtual void check(std::function<void(health_verdict)> done) = 0;
  // Stops a check in flight (its command's process group is killed); its
  // `done` is not called. Idempotent.
  virtual void cancel() = 0;
};

}  // namespace dtrun::agent
