// While a round runs (docs/rendezvous.md, "Ending a round", "Failure
// reports"): the WAIT on `over`, the heartbeat ring, a failure's restart
// count, failing the job, the failure board, progress and status.
#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/algorithm/failure_board.h"
#include "rendezvous/algorithm/returning_nodes.h"
#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

void dynamic_rendezvous::impl::watch_over(std::int64_t r) {
  waits_->get(keys_.over(r), no_timeout, [self = shared_from_this(), r, t = ticket()](
                                             store_result o) {
    if (!self->still_running(t)) return;
    // Once every node is done the host leaves and its store with it: a
    // lost connection then is the end of the job, not of the round.
    if (o.error && self->phase_ == round_phase::released) return;
    round_record end;
    if (o.error) {
      end.kind = records::record_kind::store_lost;
      end.detail = self->lost_store_reason(o.error);
    } else {
      end = records::record_from_text(o.value);
    }
    // The exit barrier's release (finish): the round ended well.
    if (end.kind == records::record_kind::finished && self->phase_ == round_phase::finishing) {
      return self->leave(r, true);
    }
    // Another dtrun's writing (a newcomer of an older version asking in):
    // not a failure; the next round's close refuses the mixed job.
    if (end.kind == records::record_kind::foreign) {
      self->log(fmt::format("round {} was ended by another dtrun version ({}); rejoining", r,
                            records::version_mismatch_line(end.version, "its writer")));
    }
    self->round_ended(r, std::move(end));
  });
}

// Another node (or the store) ended round r: tell the agent, now or when
// it watches, and end an exit barrier this node waits in.
void dynamic_rendezvous::impl::round_ended(std::int64_t r, round_record end) {
  phase_ = round_phase::over;
  if (records::is_failure(end)) failure_ended_round_ = r;
  ring_->stop();
  barrier_timer_.cancel();
  auto reason = records::describe(end);
  if (auto cb = std::exchange(on_over_, nullptr)) {
    cb(std::move(end));
  } else {
    pending_over_ = std::move(end);
  }
  if (auto f = std::exchange(finish_done_, nullptr)) {
    f(store_error_ptr(fmt::format("round {} ended before every node finished: {}", r, reason)));
  }
}

// The heartbeat ring (heartbeat_ring.h) of round r: read the counter of the
// node one group rank up, which arrived `successor_arrival`-th (0: not
// known, an older closer; a round of one has no one to watch).
void dynamic_rendezvous::impl::watch_successor(std::int64_t r, int successor_arrival) {
  if (members_ <= 1 || successor_arrival == 0) return;
  std::weak_ptr<impl> weak = shared_from_this();
  ring_->watch(keys_.heartbeat(r, successor_arrival), (group_rank_ + 1) % members_,
               [weak, r, t = ticket()](int lost) {
                 auto self = weak.lock();
                 if (!self || !self->still_running(t)) return;
                 // From empty only: once every node finished, a successor
                 // that stopped beating because it left is not lost, and the
                 // release must not be overwritten.
                 self->end_round_first(r, records::node_silent(lost));
               });
}

// Why a WAIT on `over` failed, for the log: the etcd backend says why (its
// lease, the cluster's quorum); a TCPStore connection just closes.
std::string dynamic_rendezvous::impl::lost_store_reason(const std::exception_ptr& error) const {
  if (!external_store()) return "the connection to the rendezvous store was lost";
  return fmt::format("the rendezvous store was lost: {}", error_message(error));
}

void dynamic_rendezvous::impl::watch_round(std::function<void(round_record)> on_over) {
  if (pending_over_) {
    auto end = std::move(*pending_over_);
    pending_over_.reset();
    asio::post(io_, [on_over, end] { on_over(end); });
    return;
  }
  on_over_ = std::move(on_over);
}

// r/<r>/progress: ADD 1 by each node whose workers progressed since its
// last tick (ADD 0 only reads), so every node sees the job's progress.
void dynamic_rendezvous::impl::share_progress(bool progressed,
                                              std::function<void(std::int64_t)> done) {
  if (!ops_ || round_ < 0) return;
  ops_->add(keys_.progress(round_), progressed ? 1 : 0, [done](store_result n) {
    if (!n.error) done(n.number);
  });
}

// dtrun/status/<run_id>/<node rank> and .../nodes, read by `dtrun status`.
void dynamic_rendezvous::impl::publish_status(std::string status_json,
                                              std::function<void()> stored) {
  if (!ops_ || round_ < 0) return;
  ops_->set(keys_.status_node(group_rank_), std::move(status_json),
            unheeded_("publish this node's status"));
  ops_->set(keys_.status_nodes(), std::to_string(members_), [stored](store_result r) {
    if (!r.error && stored) stored();
  });
}

// r/<r>/joined, r/<r>/closed and quarantine/count in one read: what
// /metrics counts as spares and quarantines (rendezvous_handler::census).
void dynamic_rendezvous::impl::census(
    std::function<void(rendezvous_handler::census_counts)> done) {
  if (!ops_ || round_ < 0) return;
  ops_->read_now({keys_.joined(round_), keys_.closed(round_), keys_.quarantine_count()},
                 [done](store_result r) {
    if (r.error || r.values.size() != 3) return;
    auto number = [&r](std::size_t i) {
      return parse_whole<std::int64_t>(r.values[i]).value_or(0);
    };
    done({number(0), number(1), number(2)});
  });
}

// A round that ends in failure costs the job one restart, however many
// nodes report it (workers of one collective often fail together), and
// none when the round had already ended for a reason that is no failure:
// the survivors' workers fail right after a node dies (their collective
// breaks), and on etcd the dead node's will runs only when its lease
// expires, seconds later (issue 49). So the round's first end decides,
// once for every node: each reporter compare_sets `over` from empty; the
// one whose reason stands counts the restart and publishes the count
// (r/<r>/restarts); a reporter that finds another node's failure there
// reads that count; one that finds a departure (or a newcomer) counts
// nothing and is told what ended the round.
void dynamic_rendezvous::impl::report_failure(round_record failure, restart_completion done) {
  end_here();  // our own doing: no on_over callback
  auto r = round_;
  failure.node = group_rank_;
  // Our own text, as stored: `over` holding exactly it means ours stood.
  auto ours = records::to_text(failure);
  end_round_first(r, failure, [self = shared_from_this(), r, ours, done](store_result first) {
    if (first.error) return done(first.error, {});
    if (first.value == ours) return self->count_restart(r, ours, done);
    auto end = records::record_from_text(first.value);
    if (!records::is_failure(end)) return done(nullptr, failure_verdict{0, std::move(end)});
    self->ops_->get(self->keys_.round_restarts(r), self->options_.close_timeout,
                    [r, done](store_result counted) {
      if (counted.error) return done(counted.error, {});
      auto restarts = parse_whole<int>(counted.value);
      if (!restarts) {
        return done(store_error_ptr(fmt::format("the restart count of round {} is corrupt", r)),
                    {});
      }
      done(nullptr, failure_verdict{*restarts, std::nullopt});
    });
  });
}

// The reporter whose failure ended round r: count the job's restart and
// publish it for the round's other reporters.
void dynamic_rendezvous::impl::count_restart(std::int64_t r, std::string failure_text,
                                             restart_completion done) {
  ops_->add(keys_.restarts(), 1, [self = shared_from_this(), r, failure_text,
                                  done](store_result n) {
    if (n.error) return done(n.error, {});
    if (n.number > self->options_.max_restarts) {
      // Out of restarts: the job is over for every node, not just us.
      self->mark_job_failed(failure_text);
    }
    auto restarts_key = self->keys_.round_restarts(r);
    self->ops_->set(restarts_key, std::to_string(n.number),
                    self->unheeded_("record the round's restart count"));
    // A round trip before we answer: the caller may start the next round
    // at once, which closes this client, and the others must read it.
    self->ops_->check({restarts_key}, [done, restarts = static_cast<int>(n.number)](
                                          store_result) {
      done(nullptr, failure_verdict{restarts, std::nullopt});
    });
  });
}

// How long a node's death may take to end the round (rendezvous_handler):
// an external store's liveness (its lease), else the heartbeat ring's
// (max_attempt reads that find the counter standing, after the last one
// that moved); plus one second for the round trips of the will or the
// ring and the WAIT that tells the others.
std::chrono::milliseconds dynamic_rendezvous::impl::departure_bound() const {
  constexpr std::chrono::milliseconds margin = std::chrono::seconds(1);
  if (external_store()) return bounded(options_.store_liveness + margin);
  auto interval = bounded(options_.keep_alive_interval);
  auto beats = std::max(options_.keep_alive_max_attempt, 0) + 1;
  // Without overflow: settings that large mean no bound worth holding for.
  if (interval.count() > (no_timeout - margin).count() / beats) return no_timeout;
  return interval * beats + margin;
}

// Marks the job failed for every node. `failed_round` goes first, on the
// same connection, so a node woken by `failed` finds the round whose
// failure reports to read (report_job_failed).
void dynamic_rendezvous::impl::mark_job_failed(const std::string& failure_text) {
  ops_->set(keys_.failed_round(), std::to_string(round_), unheeded_("record the failed round"));
  ops_->set(keys_.failed(), failure_text, unheeded_("mark the job failed"));
  ops_->set(keys_.ended(), "failed", unheeded_("mark the job ended"));
}

void dynamic_rendezvous::impl::fail_job(round_record failure, std::function<void()> done) {
  end_here();
  failure.node = group_rank_;
  auto text = records::to_text(failure);
  mark_job_failed(text);
  ops_->set(keys_.over(round_), text, unheeded_("end the round"));
  // A round trip, so both are applied before we leave (and close).
  ops_->check({keys_.failed()}, [done](store_result) { done(); });
}

// Failure reports (failure_board.h).
void dynamic_rendezvous::impl::publish_failure(std::int64_t r, std::string record,
                                               std::function<void()> done) {
  if (!ops_) return done();
  failure_board::publish(ops_, keys_, r, std::move(record), std::move(done));
}

void dynamic_rendezvous::impl::round_failures(std::int64_t r, failures_completion done) {
  if (!ops_) return done({}, 0);
  failure_board::read(ops_, keys_, r,
                      [self = shared_from_this(), r, done](std::vector<std::string> records,
                                                           std::size_t total) {
                        if (total == 0) return done({}, 0);
                        // Only the failed round's members count themselves
                        // in (the host waits for as many): a spare, ranked
                        // in no round (members_ 0), set all_read at once
                        // and let the host leave before a member that was
                        // rejoining had read why (it then retried an
                        // absent store until join_timeout).
                        if (self->last_round_ != r) return done(std::move(records), total);
                        self->mark_failures_read(
                            r, [done, records = std::move(records), total]() mutable {
                              done(std::move(records), total);
                            });
                      });
}

// The agent reads the failures just before it leaves a failed job. The
// store's host must not leave first, or the others could not read them
// (nor learn that the job failed): every node counts itself in, and the
// host waits, bounded by close_timeout, until all members of the round
// have.
void dynamic_rendezvous::impl::mark_failures_read(std::int64_t r, std::function<void()> done) {
  failure_board::mark_read(ops_, keys_, r, members_, [self = shared_from_this(), r,
                                                      done](bool last) {
    // The last reader: everyone knows; an external store (etcd) drops the
    // job, so a new run with this id starts afresh.
    if (last) return self->release_job(done);
    if (!self->hosting()) return done();
    self->log(fmt::format(
        "keeping the store up until the other nodes have read the failure reports (at most "
        "{} s)", self->options_.close_timeout.count() / 1000));
    failure_board::await_all_read(self->ops_, self->keys_, r, self->options_.close_timeout,
                                  done);
  });
}

}  // namespace dtrun::rendezvous
