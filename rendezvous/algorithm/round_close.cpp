// Awaiting the close (docs/rendezvous.md, "A round", step 5): every node
// WAITs for `closed`, reads the count and its own assignment, and either
// runs the round or, arriving late, asks in and waits for the next one.
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

namespace {

// Who stopped the job, from `stopped`: a job_stopped record; the value as
// found when another dtrun wrote it (it is shown, never read further).
std::string stopper(const std::string& stopped) {
  auto rec = records::record_from_text(stopped);
  return rec.kind == records::record_kind::job_stopped ? records::stopped_by(rec) : rec.detail;
}

// A member count as the closer wrote it; false for anything else.
bool parse_member_count(const std::string& text, int& out) {
  auto count = parse_whole<int>(text);
  if (!count || *count <= 0) return false;
  out = *count;
  return true;
}

}  // namespace

void dynamic_rendezvous::impl::await_close(std::int64_t r) {
  waits_->wait({keys_.closed(r)}, options_.join_timeout,
               [self = shared_from_this(), r, t = ticket()](store_result c) {
    if (!self->current(t)) return;  // a stale round's reply
    if (c.error) return self->join_timed_out(r, c);
    self->read_assignment(r);
  });
}

// Only the WAIT's own deadline means the nodes did not come; a store that
// stopped answering (close_timeout) or was lost says so.
void dynamic_rendezvous::impl::join_timed_out(std::int64_t r, const store_result& failure) {
  switch (failure.kind) {
    case store_error_kind::wait_timeout:
      break;
    case store_error_kind::none:
    case store_error_kind::timeout:
    case store_error_kind::connection_lost:
    case store_error_kind::session_lost:
    case store_error_kind::closed:
    case store_error_kind::corrupt_reply:
    case store_error_kind::other:
      return fail(failure.error);
  }
  auto error = store_error_ptr(fmt::format(
      "round {} did not gather {} node(s) within the join timeout ({} s); start the "
      "missing nodes or lower --nnodes",
      r, options_.min_nodes, options_.join_timeout.count() / 1000.0));
  if (r != 0 || arrival_ != 1) return fail(error);
  // The first round gathered this node alone: the job never started. An
  // external store (etcd) drops its keys now, so that a rerun with this id
  // starts afresh, unless someone joined meanwhile (then the keys are
  // theirs). No heartbeat after it.
  ring_->stop();
  ops_->release_unstarted({keys_.job_prefix(), keys_.status_prefix()}, keys_.joined(r), 1,
                          keys_.closing(r),
                          [self = shared_from_this(), error, t = ticket()](store_result) {
                            if (!self->current(t)) return;  // a stale round's reply
                            self->fail(error);
                          });
}

// The count, our assignment and whether a person stopped the job, in one
// request: a latecomer (an arrival past the count) has no assignment, and
// reads it as empty. A stop (Ctrl-C on a node that was joining this round
// with us) also sets `closed`, to wake us: `stopped` is read first.
void dynamic_rendezvous::impl::read_assignment(std::int64_t r) {
  waits_->read_now({keys_.closed(r), keys_.assignment(r, arrival_), keys_.stopped()},
                   [self = shared_from_this(), r, t = ticket()](store_result got) {
    if (!self->current(t)) return;  // a stale round's reply
    if (got.error) return self->fail(got.error);
    if (!got.values.at(2).empty()) {
      return self->stopped_while_joining(r, stopper(got.values.at(2)));
    }
    int members = 0;
    if (!parse_member_count(got.values.at(0), members)) return self->fail_corrupt_count(r);
    // We came in after the round closed: wait for the next one.
    if (self->arrival_ > members) return self->wait_for_next_round(r, members);
    self->complete_round(r, members, got.values.at(1));
  });
}

// The job was stopped (`who` from `stopped`) while round r gathered: the
// nodes that count themselves in (stop_seen) are the ones that joined it,
// so the node that stopped it, when it hosts the store, waits for them.
void dynamic_rendezvous::impl::stopped_while_joining(std::int64_t r, std::string who) {
  ops_->add(keys_.joined(r), 0, [self = shared_from_this(), who, t = ticket()](store_result n) {
    if (!self->current(t)) return;  // a stale round's reply
    if (!n.error) self->members_ = static_cast<int>(n.number);
    self->fail(std::make_exception_ptr(job_stopped_error(who)));
  });
}

// `over` of a round we waited on says a person stopped the job: fail with
// who did (the agent stops and exits 130) instead of joining the next round.
bool dynamic_rendezvous::impl::fail_if_stopped(const round_record& over) {
  if (over.kind != records::record_kind::job_stopped) return false;
  fail(std::make_exception_ptr(job_stopped_error(records::stopped_by(over))));
  return true;
}

// A round that is already closed is running without us: ask to be let in
// (when there is room) and join the next one.
void dynamic_rendezvous::impl::wait_for_next_round(std::int64_t r, int members) {
  auto self = shared_from_this();
  auto t = ticket();
  // With --node-unit K, only the arrival that completes a unit of
  // latecomers asks; the others wait for it, as spares do at MAX.
  if (members < options_.max_nodes && arrival_ - members >= std::max(1, options_.node_unit)) {
    log(fmt::format("round {} is running with {} of at most {} nodes; asking to join", r,
                    members, options_.max_nodes));
    // Only if the round is still running: a SET would overwrite the exit
    // barrier's release (every node would then read "a node is waiting to
    // join" and restart a finished job) or another node's reason.
    end_round_first(r, records::newcomer(), [self, r, t](store_result o) {
      if (!self->current(t)) return;  // a stale round's reply
      if (o.error) return self->fail(o.error);
      auto end = records::record_from_text(o.value);
      if (end.kind == records::record_kind::finished) return self->fail_job_finished(r);
      if (self->fail_if_stopped(end)) return;
      // Through the job's state: a round that ended because the job failed
      // ends this node's wait too, not after join_timeout in the next.
      self->read_job(self->ticket(), r + 1);
    });
    return;
  }
  if (members < options_.max_nodes) {
    log(fmt::format("round {} is running with {} nodes, in units of {}; waiting as a spare "
                    "until a unit is complete",
                    r, members, options_.node_unit));
  } else {
    log(fmt::format("round {} is full ({} nodes); waiting for the next one", r, members));
  }
  // A spare (docs/rendezvous.md, "Spare nodes"): it waits as long as the
  // round runs, not join_timeout, and the job's end is its end.
  waiting_as_spare_ = true;
  waits_->get(keys_.over(r), no_timeout, [self, r, t](store_result w) {
    if (!self->current(t)) return;  // a stale round's reply
    if (w.error) return self->fail(w.error);
    auto end = records::record_from_text(w.value);
    if (end.kind == records::record_kind::finished) {
      return self->fail(std::make_exception_ptr(job_finished_error(fmt::format(
          "the job finished (round {}) without needing this spare node", r))));
    }
    if (self->fail_if_stopped(end)) return;
    self->read_job(self->ticket(), r + 1);
  });
}

// Ends round r with `end` unless someone ended it first: the first record
// in `over` wins, so neither the exit barrier's release nor a reported
// loss can be overwritten. `done` gets what `over` holds after.
void dynamic_rendezvous::impl::end_round_first(std::int64_t r, const round_record& end,
                                               store_callback done) {
  if (!done) done = unheeded_("end the round");
  ops_->compare_set(keys_.over(r), "", records::to_text(end), std::move(done));
}

void dynamic_rendezvous::impl::fail_job_finished(std::int64_t r) {
  fail(store_error_ptr(fmt::format(
      "the job finished (round {}) before this node could join; start it with the job's "
      "next run",
      r)));
}

void dynamic_rendezvous::impl::fail_corrupt_count(std::int64_t r) {
  fail(store_error_ptr(fmt::format("the member count of round {} in the store is corrupt", r)));
}

void dynamic_rendezvous::impl::complete_round(std::int64_t r, int members,
                                              const std::string& assignment_text) {
  rank_assignment mine;
  try {
    mine = assignment_from_text(assignment_text);
  } catch (const std::exception& e) {
    return fail(store_error_ptr(
        fmt::format("this node's rank assignment in round {} is corrupt: {}", r, e.what())));
  }
  if (mine.records_min != records::record_version || mine.records_max != records::record_version) {
    int theirs = mine.records_min != records::record_version ? mine.records_min : mine.records_max;
    group_rank_ = mine.group_rank;
    return refuse_mixed_versions(r, theirs, mine.odd_host);
  }
  if (mine.successor_arrival > members) {
    return fail(store_error_ptr(fmt::format(
        "this node's rank assignment in round {} is corrupt: its ring successor arrived "
        "{}-th of {}", r, mine.successor_arrival, members)));
  }
  if (options_.fixed_rank >= 0 && mine.group_rank != options_.fixed_rank) {
    return fail(store_error_ptr(fmt::format(
        "--node-rank={} is out of range or taken by another node; give every node a "
        "distinct --node-rank from 0 to {}",
        options_.fixed_rank, members - 1)));
  }
  rendezvous_info info;
  info.round = r;
  info.group_rank = mine.group_rank;
  info.group_world_size = members;
  info.first_rank = mine.first_rank;
  info.local_world_size = mine.nproc;
  info.world_size = mine.world_size;
  info.store_host = options_.endpoint_host;
  info.store_port = hosting() ? host_->endpoint_port() : options_.endpoint_port;
  info.promoted = std::exchange(waiting_as_spare_, false);
  point_workers(info, mine, r);
  group_rank_ = info.group_rank;
  members_ = members;
  last_round_ = r;
  start_round(r, mine);
  if (auto done = std::exchange(done_, nullptr)) done(nullptr, std::move(info));
}

// MASTER_ADDR and MASTER_PORT for the round's workers.
void dynamic_rendezvous::impl::point_workers(rendezvous_info& info, const rank_assignment& mine,
                                             std::int64_t r) {
  if (!options_.workers_use_agent_store) {
    // torchrun 1.13's way: group rank 0's worker hosts a store on the port
    // its agent reserved.
    info.master_addr = mine.rank0_addr;
    info.master_port = static_cast<std::uint16_t>(mine.rank0_port);
    return;
  }
  // Workers bootstrap from a store of the agents: no port to reserve, so
  // no bind-then-release race. Each round's is a fresh one that the
  // endpoint's host opened when it joined (torch >= 2.x workers do not
  // prefix their keys by round, so a reused store would hand the new round
  // the last round's gloo addresses). Without one (an external
  // `dtrun-store serve`, a host outside this round, a static rendezvous,
  // an older host) it is the endpoint store itself.
  info.master_addr = mine.worker_addr.empty() ? info.store_host : mine.worker_addr;
  info.master_port = mine.worker_port > 0 ? static_cast<std::uint16_t>(mine.worker_port)
                                          : info.store_port;
  // Every node opened a store; only group rank 0's serves the round.
  if (!options_.worker_store_on_every_node || host_->worker_store_port() == 0) return;
  if (info.group_rank == 0) {
    log(fmt::format("round {}: this node (group rank 0) hosts the workers' store on port {}", r,
                    host_->worker_store_port()));
  } else {
    host_->close_worker_store();
  }
}

// Round r has a node of another dtrun version (docs/rendezvous.md, "Mixed
// versions"): it would misread this node's round records, or this node
// its sentences (an older dtrun reads a record it does not know as a
// newcomer and restarts without spending a restart). So nobody runs it:
// the job is failed in the other version's own words (an older dtrun
// reads sentences, and "not restarted:" tells it that restarts were not
// the cause), round r is ended the same way for those that did start,
// and this node refuses with one line naming both versions.
void dynamic_rendezvous::impl::refuse_mixed_versions(std::int64_t r, int theirs,
                                                     const std::string& host) {
  auto where = host.empty() ? fmt::format("the node that closed round {}", r)
                            : fmt::format("a node of round {} (host {})", r, host);
  auto line = records::version_mismatch_line(theirs, where);
  round_record refusal;
  refusal.kind = records::record_kind::job_failed;
  refusal.node = group_rank_;
  refusal.refused = true;
  refusal.detail = "not restarted: " + line;
  auto text = theirs < records::record_version ? records::describe(refusal) : records::to_text(refusal);
  ring_->stop();
  mark_job_failed(text);
  ops_->compare_set(keys_.over(r), "", text, unheeded_("end the round"));
  // A round trip, so that the others can read both before this node leaves.
  ops_->check({keys_.failed()}, [self = shared_from_this(), line, t = ticket()](store_result) {
    if (self->current(t)) self->fail(store_error_ptr(line));
  });
}

// Ranked: the round runs. If this node dies, its connection closes and the
// server ends the round for everyone at once (its last will).
void dynamic_rendezvous::impl::start_round(std::int64_t r, const rank_assignment& mine) {
  if (phase_ == round_phase::joining) phase_ = round_phase::running;
  deadline_timer_.cancel();
  ops_->set_will(keys_.will(round_, group_rank_), keys_.over(r),
                 records::to_text(records::node_lost(group_rank_, advertised_addr_)),
                 unheeded_("set this node's will"));
  watch_over(r);
  watch_successor(r, mine.successor_arrival);
}

}  // namespace dtrun::rendezvous
