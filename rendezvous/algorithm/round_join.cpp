// Joining a round (docs/rendezvous.md, "A round", steps 1-4): connect, read
// whether the job failed or stopped and the newest round, join it, and
// close it (the MAX-th arrival, or the last call's timer after MIN).
#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

void dynamic_rendezvous::impl::next_round(completion done) {
  unheeded_.resume();
  abandon_pending_call();
  done_ = std::move(done);
  on_over_ = nullptr;
  pending_over_.reset();
  arrived_round_ = -1;
  join_deadline_ = std::chrono::steady_clock::now() + options_.join_timeout;
  sessions_taken_ = 0;
  // Callbacks of the previous round (its WAIT on `over` fails when
  // reconnect() closes its client) must not touch this round's state.
  ++epoch_;
  phase_ = round_phase::joining;
  ring_->stop();
  deadline_timer_.cancel();
  // An exit barrier of the last round that a failure ended: its timeout
  // must not fire in this round (it would stop our heartbeats).
  barrier_timer_.cancel();
  reconnect([self = shared_from_this(), t = ticket()](std::exception_ptr error) {
    if (error) return self->fail(error);
    self->await_failure_count(t, [self, t] { self->read_job(t); });
  });
}

// After a round that another node's failure ended: its reporter wins `over`
// first and only then counts the restart and, out of restarts, marks the
// job failed (round_run.cpp, report_failure), so reading the job at once
// could miss that it failed and join a round nobody else comes to. Wait
// for the round's published count (r/<r>/restarts, set after `failed` on
// the reporter's connection), unless `failed` is already there (a refusal
// marks it before it ends the round); a reporter that died before
// counting costs at most close_timeout.
void dynamic_rendezvous::impl::await_failure_count(const round_ticket& t,
                                                   std::function<void()> then) {
  auto r = std::exchange(failure_ended_round_, -1);
  if (r < 0) return then();
  ops_->read_now({keys_.failed()}, [self = shared_from_this(), t, r, then](store_result f) {
    if (!self->current(t)) return;  // a stale round's reply
    if (f.error || !f.values.at(0).empty()) return then();
    self->ops_->get(self->keys_.round_restarts(r), self->options_.close_timeout,
                    [self, t, then](store_result) {
      if (self->current(t)) then();
    });
  });
}

// Still exactly once: the call the new one replaces ends with an error.
void dynamic_rendezvous::impl::abandon_pending_call() {
  auto abandoned = std::exchange(done_, nullptr);
  if (!abandoned) return;
  asio::post(io_, [abandoned] {
    abandoned(store_error_ptr("the round was abandoned: next_round() was called again before it "
                              "completed"),
              {});
  });
}

// A fresh connection each round: whatever a previous round left queued (a
// long WAIT) cannot hold up this one.
void dynamic_rendezvous::impl::reconnect(std::function<void(std::exception_ptr)> then) {
  if (ops_) ops_->close();
  if (waits_) waits_->close();
  close_checkpoint_watch();
  close_preflight_clients();
  auto clients = connect_(options_.join_timeout);
  ops_ = std::move(clients.ops);
  waits_ = std::move(clients.waits);
  auto pending = std::make_shared<int>(2);
  auto failed = std::make_shared<std::exception_ptr>();
  warn_if_no_host();
  auto one_done = [self = shared_from_this(), pending, failed, then,
                   t = ticket()](store_result r) {
    if (!self->current(t)) return;  // clients a later round closed
    if (r.error && !*failed) *failed = r.error;
    if (--*pending > 0) return;
    self->connected(*failed, then);
  };
  ops_->connect(one_done);
  waits_->connect(one_done);
}

void dynamic_rendezvous::impl::connected(std::exception_ptr error,
                                         const std::function<void(std::exception_ptr)>& then) {
  warning_timer_.cancel();
  if (error) return then(error);
  if (advertised_addr_.empty()) {
    // The host talks to its own store over loopback; others see it at the
    // endpoint's address.
    advertised_addr_ = !options_.local_addr.empty() ? options_.local_addr
                       : hosting()                  ? options_.endpoint_host
                                                    : ops_->local_address();
  }
  then(nullptr);
}

void dynamic_rendezvous::impl::warn_if_no_host() {
  if (hosting() || external_store()) return;
  // Connected (or failed) meanwhile: the timer was cancelled, and an
  // expiry queued before that never runs (generation_timer).
  warning_timer_.arm_after(bounded(options_.no_host_warning), [self = shared_from_this()] {
    self->log(fmt::format(
        "no store answers at {}:{} yet; the agent on that host hosts it: check that "
        "--rdzv-endpoint names the first node's address (or pass --rdzv-conf is_host=1 "
        "there) and that it is running; still retrying for up to {} s",
        self->options_.endpoint_host, self->options_.endpoint_port,
        self->options_.join_timeout.count() / 1000));
  });
}

// In one request: whether the job failed on another node (then it is over
// for us too), whether a person stopped it, and the newest round anyone
// started (a compare_set value, read as a value: not every store's
// counters are values; absent before the first round). All are set with
// non-empty values, so empty means absent.
void dynamic_rendezvous::impl::read_job(const round_ticket& t, std::int64_t at_least) {
  ops_->read_now({keys_.failed(), keys_.newest_round(), keys_.stopped()},
                 [self = shared_from_this(), t, at_least](store_result r) {
    if (!self->current(t)) return;  // a stale round's reply
    if (r.error) return self->fail(r.error);
    if (!r.values.at(0).empty()) return self->report_job_failed();
    // A person stopped the job on another node (Ctrl-C there).
    if (!r.values.at(2).empty()) {
      auto stop = records::record_from_text(r.values.at(2));
      return self->fail(std::make_exception_ptr(job_stopped_error(
          stop.kind == records::record_kind::job_stopped ? records::stopped_by(stop)
                                                        : stop.detail)));
    }
    const auto& round = r.values.at(1);
    // Join at once, without asking first whether the round has closed: a
    // node that arrives late learns it from its arrival index (past the
    // count in `closed`) and goes on to the next round, so the common case
    // costs one request and one round trip less.
    if (round.empty()) return self->join(std::max(self->last_round_ + 1, at_least));
    auto newest = parse_whole<std::int64_t>(round);
    if (!newest || *newest < 0) {
      return self->fail(store_error_ptr(
          fmt::format("the round counter of run {} is corrupt", self->options_.run_id)));
    }
    self->join(std::max({*newest, self->last_round_ + 1, at_least}));
  });
}

// The job failed on another node: say which, and which round failed (set
// before `failed`, on the same connection), for the summary.
void dynamic_rendezvous::impl::report_job_failed() {
  auto self = shared_from_this();
  auto t = ticket();
  ops_->get(keys_.failed(), options_.close_timeout, [self, t](store_result why) {
    if (!self->current(t)) return;  // a stale round's reply
    self->ops_->get(self->keys_.failed_round(), self->options_.close_timeout,
                    [self, why, t](store_result r) {
      if (!self->current(t)) return;  // a stale round's reply
      std::int64_t failed_round = self->last_round_;
      if (!r.error) failed_round = parse_whole<std::int64_t>(r.value).value_or(failed_round);
      if (why.error) {
        return self->fail(std::make_exception_ptr(job_failed_error(
            fmt::format("the job failed on another node (reason unknown); its restarts "
                        "(--max-restarts={}) are used up",
                        self->options_.max_restarts),
            failed_round, false)));
      }
      auto failure = records::record_from_text(why.value);
      // Failed by a dtrun of another version (or refused for one): its
      // words are shown, as found, beside both versions.
      if (failure.kind == records::record_kind::foreign) {
        return self->fail(store_error_ptr(fmt::format(
            "{}: {}",
            records::version_mismatch_line(failure.version, "the node that failed this job"),
            failure.detail)));
      }
      // A failure the restart policy refused (--no-restart-on, no
      // progress) says so in its record; restarts may be left.
      auto reason = records::describe(failure);
      self->fail(std::make_exception_ptr(job_failed_error(
          failure.refused ? fmt::format("the job failed on another node ({})", reason)
                          : fmt::format("the job failed on another node ({}); its restarts "
                                        "(--max-restarts={}) are used up",
                                        reason, self->options_.max_restarts),
          failed_round, failure.refused)));
    });
  });
}

void dynamic_rendezvous::impl::join(std::int64_t r) {
  // The round we leave, for the count of who can come (round_return.cpp).
  from_round_ = round_;
  from_arrival_ = round_ >= 0 ? arrival_ : 0;
  from_rank_ = round_ >= 0 && last_round_ == round_ ? group_rank_ : -1;
  round_ = r;
  // From empty for round 0: a compare_set from "-1" on an absent key
  // stores nothing (PyTorch's rule, store_semantics.cpp), and until
  // 2026-11-26 `round` was never written at all, so every newcomer walked
  // every past round from 0 and `dtrun status` always read round 0.
  ops_->compare_set(keys_.newest_round(), r == 0 ? std::string() : std::to_string(r - 1),
                    std::to_string(r), unheeded_("record the newest round"));
  ops_->add(keys_.joined(r), 1, [self = shared_from_this(), r, t = ticket()](store_result a) {
    if (!self->current(t)) return;  // a stale round's reply
    if (a.error) return self->fail(a.error);
    self->joined(r, static_cast<int>(a.number));
  });
}

// We are arrival `index` of round r: beat, describe ourselves, and close
// the round when it is ours to close.
void dynamic_rendezvous::impl::joined(std::int64_t r, int index) {
  arrival_ = index;
  arrived_round_ = r;
  // Beat from now on, before anyone knows our rank (heartbeat_ring.h).
  ring_->start(ops_, keys_.heartbeat(r, index));
  int worker_store_port = 0;
  try {
    worker_store_port = open_worker_store(r);
  } catch (const std::exception& e) {
    return fail(store_error_ptr(fmt::format(
        "cannot open the workers' store for round {}: {}; free file descriptors or "
        "ports on this node, or pass --rdzv-conf worker_store=rank0",
        r, e.what())));
  }
  ops_->set(keys_.node(r, index), to_text(describe_self(worker_store_port)),
            unheeded_("publish this node's address"));
  if (index < options_.min_nodes) {
    // Said once per round: what this node waits for, and how long.
    log(fmt::format(
        "round {}: {} of at least {} node(s) here; waiting up to {} s for the others "
        "(--rdzv-conf join_timeout)",
        r, index, options_.min_nodes,
        std::chrono::duration<double>(options_.join_timeout).count()));
  }
  if (index == options_.max_nodes) {
    close_round(r, index);
  } else {
    if (index == options_.min_nodes) arm_last_call(r);
    // A restart round closes as soon as every node that can come is here
    // (round_return.cpp); the last call bounds the wait for the others.
    if (from_round_ == r - 1 && from_arrival_ >= 1) {
      count_returner(r, index);
    } else if (index == options_.min_nodes) {
      check_everyone_here(r);
    }
  }
  await_close(r);
}

node_descriptor dynamic_rendezvous::impl::describe_self(int worker_store_port) const {
  return node_descriptor{
      .addr = advertised_addr_,
      .hostname = os_->host_name(),
      .pid = os_->pid(),
      .nproc = options_.local_world_size,
      .prev_rank = options_.fixed_rank >= 0 ? options_.fixed_rank : group_rank_,
      .master_port = options_.workers_use_agent_store ? 0 : os_->reserve_port(advertised_addr_),
      .worker_store_port = worker_store_port,
      .records = records::record_version};
}

// Enough nodes: give latecomers last_call_timeout, then close with whoever
// is there.
void dynamic_rendezvous::impl::arm_last_call(std::int64_t r) {
  // Only this arming runs (generation_timer): not an expiry queued before
  // the round closed or before a later round re-armed it; the ticket also
  // keeps a later round with the same number out.
  deadline_timer_.arm_after(bounded(options_.last_call_timeout), [self = shared_from_this(), r,
                                                                  t = ticket()] {
    if (!self->current(t)) return;
    self->ops_->add(self->keys_.joined(r), 0, [self, r, t](store_result n) {
      if (!self->current(t)) return;  // a stale round's reply
      if (n.error) return self->fail(n.error);
      // Whole units only (--node-unit): the rest wait as spares. Never
      // below min_nodes: it is a multiple, and this is its arrival's timer.
      auto count = closing_count(n.number, self->options_.max_nodes, self->options_.node_unit);
      self->close_round(r, count,
                        fmt::format("round {}: the last call ({} s) is over; closing with {} "
                                    "node(s)",
                                    r,
                                    std::chrono::duration<double>(
                                        self->options_.last_call_timeout).count(),
                                    count));
    });
  });
}

// Several nodes may try to close a round (the max_nodes-th arrival, the
// last call's timer); compare_set on `closing` lets the first count win.
// The winner then publishes the assignments and `closed` in one request
// (publish_ranks), so a node that sees `closed` finds its assignment.
void dynamic_rendezvous::impl::close_round(std::int64_t r, int members, std::string why) {
  auto count = std::to_string(members);
  ops_->compare_set(keys_.closing(r), "", count,
                    [self = shared_from_this(), r, members, count, why = std::move(why),
                     t = ticket()](store_result c) {
    if (!self->current(t)) return;  // a stale round's reply
    if (c.error) return self->fail(c.error);
    if (c.value != count) return;  // someone else closed it, with another count
    if (!why.empty()) self->log(why);
    self->publish_ranks(r, members);
  });
}

void dynamic_rendezvous::impl::publish_ranks(std::int64_t r, int members) {
  std::vector<std::string> nodes_keys;
  for (int i = 1; i <= members; ++i) nodes_keys.push_back(keys_.node(r, i));
  ops_->multi_get(nodes_keys, options_.close_timeout,
                  [self = shared_from_this(), r, t = ticket()](store_result all) {
    if (!self->current(t)) return;  // a stale round's reply
    if (all.error) return self->fail(all.error);
    std::vector<node_descriptor> nodes;
    try {
      for (const auto& v : all.values) nodes.push_back(descriptor_from_text(v));
    } catch (const std::exception& e) {
      return self->fail(store_error_ptr(
          fmt::format("a node descriptor in round {} is corrupt: {}", r, e.what())));
    }
    auto assignments = make_assignments(nodes, self->options_.worker_store_on_every_node
                                                   ? worker_store_choice::group_rank_0
                                                   : worker_store_choice::the_host);
    // One key per node, all in one request: each node reads only its own,
    // so a round costs every node the same whatever its size. `closed`
    // comes last: whoever sees it finds every assignment (the etcd backend
    // writes in order, in batches).
    std::vector<std::string> published, texts;
    for (std::size_t i = 0; i < assignments.size(); ++i) {
      published.push_back(self->keys_.assignment(r, static_cast<int>(i) + 1));
      texts.push_back(to_text(assignments[i]));
    }
    published.push_back(self->keys_.closed(r));
    texts.push_back(std::to_string(assignments.size()));
    self->ops_->multi_set(std::move(published), std::move(texts),
                          self->unheeded_("publish the round's ranks"));
  });
}

// Opens a fresh, empty store for the workers of round `r` and returns its
// port, closing the last round's (our own workers are stopped before we
// rejoin; other nodes' stragglers losing it only end sooner). Only the
// node that hosts the endpoint store does this (or, with an external
// store, every node), and only when workers use the agents' store and
// fresh_worker_store is set (not for the static backend). Returns 0 when
// it does not apply. Throws store_error when no port can be bound.
int dynamic_rendezvous::impl::open_worker_store(std::int64_t r) {
  if (!options_.workers_use_agent_store || !options_.fresh_worker_store) return 0;
  if (!hosting() && !options_.worker_store_on_every_node) return 0;
  auto port = host_->open_worker_store();
  // With a store on every node, only group rank 0's serves: said once the
  // ranks are known (complete_round).
  if (hosting()) log(fmt::format("round {}: the workers' store is on port {}", r, port));
  return port;
}

}  // namespace dtrun::rendezvous
