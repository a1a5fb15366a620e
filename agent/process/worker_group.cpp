#include "agent/process/worker_group.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace dtrun::agent {

worker_group::worker_group(boost::asio::io_context& io, process_runner& runner, hooks h,
                           std::chrono::milliseconds kill_grace)
    : runner_(runner), hooks_(std::move(h)), stop_timer_(io), kills_(kill_grace), kill_timer_(io) {}

void worker_group::start() {
  runner_.start([this](pid_t pid, int wait_status) { on_exit(pid, wait_status); });
}

// A new round never inherits a stop: its workers are not the ones a
// previous stop's SIGKILL or deadline was meant for.
void worker_group::clear() {
  stop_timer_.cancel();
  kills_.clear();
  kill_timer_.cancel();
  workers_.clear();
}

spawn_result worker_group::spawn(int local_rank, int rank, const spawn_request& request,
                                 std::string error_file) {
  spawn_result spawned = runner_.spawn(request);
  if (!spawned.ok()) return spawned;
  runner_.guard(spawned.pid);
  worker started;
  started.local_rank = local_rank;
  started.rank = rank;
  started.pid = spawned.pid;
  started.error_file = std::move(error_file);
  started.started_at = std::chrono::system_clock::now();
  workers_.push_back(std::move(started));
  return spawned;
}

// A child ended: one of ours not reaped yet, a watched helper, or an
// adopted orphan (nothing to do).
void worker_group::on_exit(pid_t pid, int wait_status) {
  auto helper = std::find_if(helpers_.begin(), helpers_.end(),
                             [pid](const auto& h) { return h.first == pid; });
  if (helper != helpers_.end()) {
    // Forgotten before the call: the pid is no longer the helper's, and the
    // callback may watch or unwatch others.
    auto on_helper_exit = std::move(helper->second);
    helpers_.erase(helper);
    on_helper_exit(wait_status);
    return;
  }
  worker* w = live(pid);
  if (w == nullptr) return;
  exit_status ended = decode_wait_status(wait_status);
  w->state = worker_state::draining;
  w->exit_code = ended.code;
  kills_.forget(pid);
  if (hooks_.reaped) hooks_.reaped(pid);
  // Its last lines come before the agent reacts to its exit (at once when
  // its output is not piped through the agent). The exit time is taken
  // now: draining the worker's output may take a moment.
  hooks_.drain(w->local_rank, [this, pid, ended, at = std::chrono::system_clock::now()] {
    auto it = std::find_if(workers_.begin(), workers_.end(), [pid](const worker& x) {
      return x.pid == pid && x.state == worker_state::draining;
    });
    if (it == workers_.end()) return;
    it->state = worker_state::exited;
    hooks_.exited(*it, ended, at);
  });
}

void worker_group::stop(int sig, std::chrono::milliseconds grace) {
  signal_all(sig);
  if (sig != SIGKILL) signal_all(SIGCONT);
  if (waited_for() == 0) return;
  stop_timer_.arm_after(grace, [this, grace] {
    if (hooks_.log) {
      hooks_.log(fmt::format("workers still running {} ms after the stop signal; sending SIGKILL",
                             grace.count()));
    }
    signal_all(SIGKILL);
  });
}

void worker_group::cancel_stop() { stop_timer_.cancel(); }

void worker_group::cancel_timers() {
  stop_timer_.cancel();
  kill_timer_.cancel();
}

void worker_group::signal_all(int sig) {
  for (const auto& w : workers_) {
    if (!w.alive()) continue;
    runner_.signal_worker(w.pid, sig);
    if (sig == SIGKILL) watch_kill(w.pid);
  }
}

void worker_group::signal_one(worker& w, int sig) {
  if (!w.alive()) return;
  runner_.signal_process(w.pid, sig);
  if (sig == SIGKILL) watch_kill(w.pid);
}

worker* worker_group::live(pid_t pid) {
  auto it = std::find_if(workers_.begin(), workers_.end(),
                         [pid](const worker& w) { return w.pid == pid && w.alive(); });
  return it == workers_.end() ? nullptr : &*it;
}

std::size_t worker_group::waited_for() const {
  return static_cast<std::size_t>(std::count_if(
      workers_.begin(), workers_.end(), [](const worker& w) { return w.waited_for(); }));
}

// Every SIGKILL sent to a worker gets a deadline (kill_watch): a worker the
// kernel holds in uninterruptible sleep does not die of it, and waiting
// for its exit would wedge the agent.
void worker_group::watch_kill(pid_t pid) {
  kills_.killed(pid, std::chrono::steady_clock::now());
  arm_kill_timer();
}

void worker_group::arm_kill_timer() {
  if (auto deadline = kills_.next_deadline()) {
    kill_timer_.arm_at(*deadline, [this] { kills_overdue(); });
  } else {
    kill_timer_.cancel();
  }
}

// Workers still not reaped a grace after their SIGKILL: the group stops
// waiting for them. Their exit, should it ever come, is still reaped.
void worker_group::kills_overdue() {
  std::vector<unkillable_worker> given_up;
  for (pid_t pid : kills_.overdue(std::chrono::steady_clock::now())) {
    worker* w = live(pid);
    if (w == nullptr) continue;
    char state = runner_.state(pid);
    w->state = worker_state::unkillable;
    given_up.push_back({w, state});
  }
  arm_kill_timer();
  if (!given_up.empty()) hooks_.unkillable(given_up);
}

void worker_group::end_round(std::vector<pid_t> keep) {
  stop_timer_.cancel();
  for (const auto& w : workers_) {
    runner_.kill_group(w.pid);
    runner_.unguard(w.pid);
  }
  kills_.clear();  // their groups are killed above; the rest is the kernel's
  kill_timer_.cancel();
  // A helper is not the round's: it ends on its own terms (its owner
  // kills it at its timeout), and its exit is still waited for.
  for (const auto& h : helpers_) keep.push_back(h.first);
  runner_.kill_adopted(std::move(keep));
}

void worker_group::watch_helper(pid_t pid, std::function<void(int wait_status)> on_exit) {
  unwatch_helper(pid);
  helpers_.emplace_back(pid, std::move(on_exit));
}

void worker_group::unwatch_helper(pid_t pid) {
  helpers_.erase(std::remove_if(helpers_.begin(), helpers_.end(),
                                [pid](const auto& h) { return h.first == pid; }),
                 helpers_.end());
}

}  // namespace dtrun::agent
