// The file-timer watchdog's deadlines, keyed like torch's FileTimerServer
// by (pid, scope_id), with an index by deadline so the earliest one is
// found without scanning (the agent arms one timer for it). Pure: times
// are wall-clock seconds given by the caller (torch's clients send
// time.time() + after).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace dtrun::agent {

class timer_table {
 public:
  // A process whose deadline passed, and what to do about it (torch's
  // rule): of its expired timers in deadline order, the first with a
  // signal above 0 decides; signal 0 means none had one (do not kill).
  struct expired {
    pid_t pid = 0;
    int signal = 0;
    std::string scope_id;  // the deciding timer's (the earliest expired when signal is 0)
    double expiration_time = 0;
  };

  explicit timer_table(std::size_t max_timers) : max_timers_(max_timers) {}

  // Sets (or moves) the (pid, scope_id) timer. Returns false, changing
  // nothing, when it is a new key and max_timers are held already.
  bool set(pid_t pid, const std::string& scope_id, double expiration_time, int signal);

  // Releases the (pid, scope_id) timer; no-op when there is none.
  void release(pid_t pid, const std::string& scope_id);

  // Drops every timer of `pid` (its process ended).
  void drop(pid_t pid);

  void clear();

  // The earliest deadline held, if any.
  std::optional<double> earliest() const;

  // Removes every process that has a timer expired at `now` (<=), all its
  // timers with it (torch clears a reaped process's other timers too), and
  // returns one entry per such process, in deadline order.
  std::vector<expired> take_expired(double now);

  std::size_t size() const { return timers_.size(); }

 private:
  using key = std::pair<pid_t, std::string>;
  struct entry {
    double expiration_time;
    int signal;
  };
  void erase(std::map<key, entry>::iterator it);

  std::size_t max_timers_;
  std::map<key, entry> timers_;
  std::set<std::tuple<double, pid_t, std::string>> by_deadline_;
};

}  // namespace dtrun::agent
