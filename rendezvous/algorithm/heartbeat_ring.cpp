#include "rendezvous/algorithm/heartbeat_ring.h"

#include <algorithm>

namespace dtrun::rendezvous {

heartbeat_ring::heartbeat_ring(boost::asio::io_context& io, settings s)
    : timer_(io), settings_(s) {}

void heartbeat_ring::start(std::shared_ptr<round_store> store, std::string own_counter) {
  stop();
  store_ = std::move(store);
  own_counter_ = std::move(own_counter);
  successor_counter_.clear();
  on_lost_ = nullptr;
  schedule(run_);
}

void heartbeat_ring::watch(std::string successor_counter, int successor,
                           std::function<void(int)> on_lost) {
  successor_counter_ = std::move(successor_counter);
  successor_ = successor;
  on_lost_ = std::move(on_lost);
  last_seen_ = -1;
  misses_ = 0;
  ++watched_;
}

void heartbeat_ring::stop() {
  ++run_;
  timer_.cancel();
}

// The next beat is armed when the store has counted this one, so a short
// (even 0) interval cannot queue operations faster than the store answers.
void heartbeat_ring::schedule(std::uint64_t run) {
  // Only this arming of this run (generation_timer, and the run): an
  // expiry queued before a stop must not beat for a round that is over or
  // re-arm the timer.
  timer_.arm_after(std::clamp<std::chrono::milliseconds>(
                       settings_.interval, std::chrono::milliseconds::zero(), no_timeout),
                   [self = shared_from_this(), run] {
                     if (run != self->run_) return;
                     self->beat(run);
                   });
}

void heartbeat_ring::beat(std::uint64_t run) {
  auto self = shared_from_this();
  store_->add(own_counter_, 1, [self, run](store_result h) {
    if (h.error || run != self->run_) return;
    self->schedule(run);
  });
  if (successor_counter_.empty()) return;
  store_->add(successor_counter_, 0, [self, run, watched = watched_](store_result h) {
    if (h.error || run != self->run_ || watched != self->watched_) return;
    if (h.number != self->last_seen_) {
      self->misses_ = 0;
      self->last_seen_ = h.number;
      return;
    }
    if (++self->misses_ == self->settings_.max_attempt && self->on_lost_) {
      self->on_lost_(self->successor_);
    }
  });
}

}  // namespace dtrun::rendezvous
