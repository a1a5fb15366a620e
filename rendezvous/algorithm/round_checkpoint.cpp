// A job-wide checkpoint (--checkpoint-signal; docs/rendezvous.md, "A
// job-wide checkpoint"): one key per round, r/<r>/checkpoint, set once by
// compare_set (the first request wins: a notice that reached every node at
// once is one request), and a WAIT on it by every node of the round.
#include <utility>

#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

namespace dtrun::rendezvous {

void dynamic_rendezvous::impl::request_checkpoint(std::string who,
                                                  std::function<void(bool)> done) {
  bool running = phase_ == round_phase::running || phase_ == round_phase::finishing;
  if (!ops_ || !running) return done(false);
  // Asked here before in this round: the store would answer our own text,
  // which reads as winning.
  if (checkpoint_asked_round_ == round_) return done(false);
  checkpoint_asked_round_ = round_;
  auto mine = fmt::format("node {} (host {}) {}", group_rank_, os_->host_name(), who);
  ops_->compare_set(keys_.checkpoint(round_), "", mine, [done, mine](store_result r) {
    done(!r.error && r.value == mine);
  });
}

// The WAIT cannot share the round's connection: its watch lane holds the
// WAIT on `over` for the whole round, and a second WAIT queued behind it
// would be sent only once the round is over. So the watch opens clients of
// its own, one more connection per node, and only in jobs that pass
// --checkpoint-signal. Closed when the next round connects, or at the end.
void dynamic_rendezvous::impl::watch_checkpoint(std::function<void(std::string)> on_request) {
  if (phase_ != round_phase::running || round_ < 0) return;
  close_checkpoint_watch();
  checkpoint_watch_ = connect_(options_.join_timeout);
  auto watch = checkpoint_watch_.ops;
  auto lane = checkpoint_watch_.waits;
  auto ignore = [](store_result) {};
  watch->connect(ignore);
  lane->connect(ignore);  // unused; connected so that it closes as it should
  auto r = round_;
  watch->get(keys_.checkpoint(r), no_timeout,
             [self = shared_from_this(), r, t = ticket(), on_request](store_result w) {
    // Our own next round's connection closed this one, or the round ended
    // (a request that came with its end still counts: our workers may run).
    if (!self->current(t) || self->phase_ == round_phase::shut_down) return;
    if (w.error) {
      // Closed here, or lost with the round's end (the store's host left):
      // nothing to say. Lost while the round runs: said once.
      if (w.kind == store_error_kind::closed || self->phase_ != round_phase::running) return;
      self->log(fmt::format("round {}: lost the watch of checkpoint requests: {}", r,
                            w.message()));
      return;
    }
    on_request(w.value);
  });
}

void dynamic_rendezvous::impl::close_checkpoint_watch() {
  auto clients = std::exchange(checkpoint_watch_, round_store_clients{});
  if (clients.waits) clients.waits->close();
  if (clients.ops) clients.ops->close();
}

}  // namespace dtrun::rendezvous
