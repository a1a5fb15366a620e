#include "agent/watch/timer_table.h"


namespace dtrun::agent {

bool timer_table::set(pid_t pid, const std::string& scope_id, double expiration_time, int signal) {
  key k{pid, scope_id};
  auto it = timers_.find(k);
  if (it == timers_.end()) {
    if (timers_.size() >= max_timers_) return false;
  } else {
    by_deadline_.erase({it->second.expiration_time, pid, scope_id});
    timers_.erase(it);
  }
  timers_.emplace(k, entry{expiration_time, signal});
  by_deadline_.emplace(expiration_time, pid, scope_id);
  return true;
}

void timer_table::erase(std::map<key, entry>::iterator it) {
  by_deadline_.erase({it->second.expiration_time, it->first.first, it->first.second});
  timers_.erase(it);
}

void timer_table::release(pid_t pid, const std::string& scope_id) {
  auto it = timers_.find({pid, scope_id});
  if (it != timers_.end()) erase(it);
}

void timer_table::drop(pid_t pid) {
  auto it = timers_.lower_bound({pid, std::string()});
  while (it != timers_.end() && it->first.first == pid) {
    auto next = std::next(it);
    erase(it);
    it = next;
  }
}

void timer_table::clear() {
  timers_.clear();
  by_deadline_.clear();
}

std::optional<double> timer_table::earliest() const {
  if (by_deadline_.empty()) return std::nullopt;
  return std::get<0>(*by_deadline_.begin());
}

std::vector<timer_table::expired> timer_table::take_expired(double now) {
  std::vector<expired> out;
  std::map<pid_t, std::size_t> index;  // pid -> its entry in out
  // Deadline order: each process's first entry is its earliest expired
  // timer, and a later one with a signal replaces a signal-less one.
  for (auto it = by_deadline_.begin(); it != by_deadline_.end() && std::get<0>(*it) <= now; ++it) {
    const auto& [when, pid, scope] = *it;
    int sig = timers_.at({pid, scope}).signal;
    auto [at, added] = index.emplace(pid, out.size());
    if (added) {
      out.push_back({pid, sig, scope, when});
    } else if (expired& e = out[at->second]; e.signal == 0 && sig > 0) {
      e.signal = sig;
      e.scope_id = scope;
      e.expiration_time = when;
    }
  }
  for (const auto& e : out) drop(e.pid);
  return out;
}

}  // namespace dtrun::agent
