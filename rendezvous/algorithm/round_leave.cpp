// Leaving (docs/rendezvous.md, "Leaving"): the exit barrier on the WAIT on
// `over`, the goodbye that lets the store's host go, a stop (Ctrl-C) and
// the release of an external store's keys.
#include <utility>

#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

namespace dtrun::rendezvous {

// Ctrl-C on this node: `stopped` for nodes that join later, then the
// round's `over` for those running it (unless something ended it first:
// they then rejoin and read `stopped`). A round trip before `done`, so both
// are applied before we leave, the store's host included.
void dynamic_rendezvous::impl::stop_job(std::string reason, std::function<void()> done) {
  if (!ops_) return done();
  bool joining = phase_ == round_phase::joining && round_ >= 0;
  // Our own next_round() still pending is dropped: we are leaving, and it
  // would only come back with our own stop.
  if (joining) done_ = nullptr;
  end_here();
  // Before its first round this node has no rank yet: the host says where.
  round_record stop;
  stop.kind = records::record_kind::job_stopped;
  stop.node = last_round_ >= 0 ? group_rank_ : -1;
  stop.host = os_->host_name();
  stop.detail = std::move(reason);
  // One request after the other: an external store (etcd) may apply
  // requests sent together in any order, and the release must come last.
  ops_->set(keys_.ended(), "was stopped", unheeded_("mark the job ended"));
  ops_->set(keys_.stopped(), records::to_text(stop), [self = shared_from_this(), stop, done,
                                                     joining](store_result) {
    if (self->round_ < 0) return self->await_stop_seen(done);
    self->end_round_first(self->round_, stop, [self, done, joining](store_result) {
      if (!joining) return self->await_stop_seen(done);
      self->wake_joiners(done);
    });
  });
}

// Ctrl-C while our round still gathers: the nodes that joined it wait for
// `closed`, not `over`. Set it (unless the round closed meanwhile) so they
// wake, read `stopped` (read_assignment) and count themselves in; until
// then we wait for those that joined, as for the members of a round.
void dynamic_rendezvous::impl::wake_joiners(std::function<void()> done) {
  auto self = shared_from_this();
  auto r = round_;
  ops_->add(keys_.joined(r), 0, [self, r, done](store_result n) {
    if (!n.error) self->members_ = static_cast<int>(n.number);
    self->ops_->compare_set(self->keys_.closed(r), "", "0",
                            [self, done](store_result) { self->await_stop_seen(done); });
  });
}

// After stop_job told the others. The store's host leaves last: its store
// goes with it, and a node that lost it before reading why would wait to
// rejoin instead. With an external store (etcd) the job is dropped once
// every node has seen the stop, so a rerun with this run id starts afresh
// instead of reading `stopped`.
void dynamic_rendezvous::impl::await_stop_seen(std::function<void()> done) {
  auto self = shared_from_this();
  // Leaving after a stop is no loss: a will executed later would end a
  // round (or recreate a key of a released job) for nothing.
  ops_->withdraw_will(keys_.will(round_, group_rank_), unheeded_("withdraw this node's will"));
  auto release = [self, done] {
    if (!self->external_store()) return done();
    self->release_job(done);
  };
  count_stop_seen([self, release](bool last) {
    if (last || self->members_ <= 1) return release();
    if (!self->hosting() && !self->external_store()) return release();
    self->log(fmt::format("{} until the other nodes have seen the stop (at most {} s)",
                          self->hosting() ? "keeping the store up" : "waiting",
                          self->options_.close_timeout.count() / 1000));
    self->ops_->wait({self->keys_.stop_seen_by_all()}, self->options_.close_timeout,
                     [release](store_result) { release(); });
  });
}

// Another node stopped the job (its reason ended our round): count
// ourselves in, so that node may leave (await_stop_seen).
void dynamic_rendezvous::impl::stop_seen(std::function<void()> done) {
  if (!ops_) return done();
  end_here();
  ops_->withdraw_will(keys_.will(round_, group_rank_), unheeded_("withdraw this node's will"));
  count_stop_seen([done](bool) { done(); });
}

// This node leaves on its own (its health check failed): the others see
// an ordinary membership change (from empty: a failure reported first
// keeps its reason) and rejoin without it; no restart is counted. The will
// goes first, so that closing our connection adds nothing. A round trip
// before `done`: the caller exits next, and the others must be told.
void dynamic_rendezvous::impl::leave_job(round_record departure, std::function<void()> done) {
  if (!ops_ || last_round_ < 0) return done();
  bool running = phase_ == round_phase::running || phase_ == round_phase::finishing;
  end_here();
  ops_->withdraw_will(keys_.will(round_, group_rank_), unheeded_("withdraw this node's will"));
  if (!running) return done();
  departure.kind = records::record_kind::node_left;
  departure.node = group_rank_;
  departure.host = os_->host_name();
  end_round_first(round_, departure, [done](store_result) { done(); });
}

// Each node of the round counts itself once it knows the job was stopped;
// the last one releases the node that stopped it (stop_job).
void dynamic_rendezvous::impl::count_stop_seen(std::function<void(bool last)> done) {
  ops_->add(keys_.stop_seen(), 1, [self = shared_from_this(), done](store_result n) {
    if (n.error || n.number < self->members_) return done(false);
    self->ops_->set(self->keys_.stop_seen_by_all(), "1", [done](store_result) { done(true); });
  });
}

// Exit barrier: count ourselves done; the last node releases everyone by
// ending the round with a `finished` record. The WAIT on `over` that
// every node holds anyway (watch_over) is the barrier: a node lost
// meanwhile ends it too, with its own reason, and a node needs no second
// connection (10,000 nodes finishing together would otherwise open 10,000
// at once).
void dynamic_rendezvous::impl::finish(std::function<void(std::exception_ptr)> done) {
  finish_done_ = std::move(done);
  if (phase_ == round_phase::running) phase_ = round_phase::finishing;
  // Heartbeats go on: a node waiting here is alive, and its ring
  // predecessor, maybe still training, must not declare it lost.
  auto self = shared_from_this();
  auto r = round_;
  barrier_timer_.arm_after(bounded(options_.exit_barrier_timeout), [self, r, t = ticket()] {
    if (!self->current(t)) return;
    self->log(fmt::format("exit barrier: not every node finished within {} s; leaving anyway",
                          self->options_.exit_barrier_timeout.count() / 1000));
    self->leave(r, false);
  });
  // Leaving on purpose is not a loss: withdraw the will first.
  ops_->withdraw_will(keys_.will(round_, group_rank_), unheeded_("withdraw this node's will"));
  ops_->add(keys_.done(r), 1, [self, r](store_result n) {
    if (n.error) return self->finish_with(n.error);
    if (n.number < self->members_) return;
    // Only if no one ended the round first: a node lost just now must not
    // be covered up. `ended` is for nodes outside the round (quarantine).
    self->end_round_first(r, records::finished(), [self](store_result o) {
      if (!o.error && records::record_from_text(o.value).kind == records::record_kind::finished) {
        self->ops_->set(self->keys_.ended(), "finished", self->unheeded_("mark the job ended"));
      }
    });
  });
}

// After the barrier: every node says it saw the end before the host, whose
// exit takes the store away, may go. Without this, a node whose connection
// closed before it read the release would think the round had ended badly
// and try to rejoin a store that is gone.
void dynamic_rendezvous::impl::leave(std::int64_t r, bool everyone_done) {
  barrier_timer_.cancel();
  if (everyone_done) phase_ = round_phase::released;
  ring_->stop();
  if (!everyone_done) return finish_with(nullptr);
  ops_->add(keys_.left(r), 1, [self = shared_from_this(), r](store_result n) {
    if (n.error) return self->finish_with(nullptr);
    // The last to leave releases the host, and the job's keys when the
    // store outlives the job (etcd).
    if (n.number >= self->members_) {
      self->ops_->set(self->keys_.all_left(r), "1", self->unheeded_("mark that every node left"));
      return self->release_job([self] { self->finish_with(nullptr); });
    }
    if (!self->hosting()) return self->finish_with(nullptr);
    self->await_all_left(r);
  });
}

// The host waits until every node said goodbye (at most close_timeout).
// The watch lane is free: its WAIT on `over` has returned.
void dynamic_rendezvous::impl::await_all_left(std::int64_t r) {
  waits_->wait({keys_.all_left(r)}, options_.close_timeout,
               [self = shared_from_this()](store_result w) {
    // Said, so that a lost goodbye (a bug: the last node sends it before it
    // exits) is seen.
    if (w.error) {
      self->log(fmt::format(
          "exit: not every node confirmed the end within {} s; leaving anyway",
          self->options_.close_timeout.count() / 1000.0));
    }
    self->finish_with(nullptr);
  });
}

// Drops dtrun/<run_id>/, the job's status keys and its (withdrawn) wills,
// which live on their agents' leases and would otherwise stay until those
// expire; best effort.
void dynamic_rendezvous::impl::release_job(std::function<void()> done) {
  ops_->release(keys_.status_prefix(), unheeded_("release the job's status keys"));
  ops_->release(keys_.will_prefix(), unheeded_("release the job's wills"));
  ops_->release(keys_.job_prefix(), [done](store_result) { done(); });
}

// The exit barrier's answer. Without a release (an error, or leaving alone
// after exit_barrier_timeout) the round goes on as far as this node knows.
void dynamic_rendezvous::impl::finish_with(std::exception_ptr error) {
  if (phase_ == round_phase::finishing) phase_ = round_phase::running;
  if (auto f = std::exchange(finish_done_, nullptr)) f(error);
}

}  // namespace dtrun::rendezvous
