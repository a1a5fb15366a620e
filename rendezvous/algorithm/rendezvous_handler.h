// How an agent learns who it is in the job for one round of workers.
//
// A rendezvous handler answers "which round is this, which node am I, how
// many workers does every node run, and where is the store the workers
// meet in". Standalone runs answer it without talking to anyone
// (standalone_rendezvous); the multi-node handler answers it through the
// store (dynamic_rendezvous). Both plug into the same agent loop, so
// standalone exercises the multi-node code path. This is only the
// interface: every handler implements every method, and keeps its own
// state.
//
// Threading: handlers live on the agent's single event loop. next_round()
// must never block that loop (a host agent's own store server runs on it,
// so a blocking store call from the loop would deadlock); it completes by
// calling `done` from the loop, never from inside next_round() itself.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/record/round_record.h"

namespace dtrun::rendezvous {

using records::round_record;

struct rendezvous_info {
  // 0 for the first round; each restart or re-admission is a new round.
  std::int64_t round = 0;
  // This node's rank among the nodes of this round.
  int group_rank = 0;
  int group_world_size = 1;
  // This node's workers are global ranks first_rank .. first_rank +
  // local_world_size - 1 of world_size (nodes may run different counts).
  int first_rank = 0;
  int local_world_size = 1;
  int world_size = 1;
  // Where the workers' process group meets (MASTER_ADDR / MASTER_PORT).
  std::string master_addr;
  std::uint16_t master_port = 0;
  // The store the agents (and, with TORCHELASTIC_USE_AGENT_STORE, the
  // workers) use, as host and port.
  std::string store_host;
  std::uint16_t store_port = 0;
  // This node waited as a spare (it arrived when the job was full) and
  // this round is its first: it took the free group rank of a node that
  // left.
  bool promoted = false;
};

// next_round() fails with this when the job finished while this node
// waited as a spare (docs/rendezvous.md, "Spare nodes"): it was not
// needed, which is no failure.
class job_finished_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// next_round() fails with this when the job already failed on another
// node (its restarts are used up, or its restart policy refused one): the
// job is over here too. `round` is the round that failed, whose failures
// round_failures() returns; `refused`: the other node's policy refused a
// restart (its record says so), restarts may be left.
class job_failed_error : public std::runtime_error {
 public:
  job_failed_error(const std::string& what, std::int64_t failed_round, bool was_refused)
      : std::runtime_error(what), round(failed_round), refused(was_refused) {}
  std::int64_t round;
  bool refused;
};

// next_round() fails with this when a person stopped the job on another
// node (Ctrl-C there, docs/agent.md "Signals on several nodes"): `who`
// says where and how ("node 1 (host h2) by SIGINT (Ctrl-C there)").
class job_stopped_error : public std::runtime_error {
 public:
  explicit job_stopped_error(const std::string& stopped_by)
      : std::runtime_error("the job was stopped on " + stopped_by), who(stopped_by) {}
  std::string who;
};

// What --preflight's verdict may take out of a round without leaving it
// short (docs/agent.md, "Preflight"): its members, the spares waiting to
// take a place, and the fewest nodes the job runs on (--nnodes's MIN).
struct preflight_room {
  int members = 1;
  int spares = 0;
  int min_nodes = 1;
};

class rendezvous_handler {
 public:
  // Either the round's info or the error that ended the rendezvous.
  using completion = std::function<void(std::exception_ptr error, rendezvous_info info)>;

  virtual ~rendezvous_handler();

  // Starts the next round (the first call starts round 0). Completes on the
  // event loop through `done`, exactly once.
  virtual void next_round(completion done) = 0;

  // The run id workers see as TORCHELASTIC_RUN_ID.
  virtual const std::string& run_id() const = 0;

  // Ends the rendezvous (closes the store this handler hosts, if any).
  // Idempotent; after it, next_round() must not be called.
  virtual void shutdown() = 0;

  // Multi-node events. A single node is the whole job: for it these
  // complete at once (standalone_rendezvous says how).

  // After a round completed: calls `on_over` (once, on the loop) when the
  // round ends because of another node: it failed, died, or a node wants
  // to join, or the job was stopped (a job_stopped record). The agent
  // then stops its workers and calls next_round().
  virtual void watch_round(std::function<void(round_record end)> on_over) = 0;

  // This node's workers failed: end the round on every node and count a
  // restart for the whole job, unless the round had already ended for a
  // reason that is no failure. The round's first end decides, once for
  // every node (docs/rendezvous.md, "Ending a round"):
  // - it is this failure: the job's restart count is raised by one;
  // - it is another node's failure: the count that node raised;
  // - it is a departure (a node lost, silent or gone) or another end that
  //   is no failure (a newcomer): no restart; `ended_by` says which, and
  //   the failure is what that end caused.
  // Completes with the job-wide count (so every node honours
  // --max-restarts the same way).
  struct failure_verdict {
    int restarts = 0;  // the job's restart count (with ended_by: as it was)
    // Set when the round's first end is not a failure: that end.
    std::optional<round_record> ended_by;
  };
  using restart_completion = std::function<void(std::exception_ptr error, failure_verdict)>;
  // `failure`: a worker_failed record; the handler sets its node.
  virtual void report_failure(round_record failure, restart_completion done) = 0;

  // How long after another node dies, at most, this rendezvous takes to
  // end the round with its departure (etcd: its lease's TTL; c10d: the
  // heartbeat ring's timeout, a closed connection being seen at once),
  // with a margin for the round trips. The agent holds a failure that a
  // lost peer can cause this long (docs/agent.md, "A failure a departure
  // explains"). Zero: no other node can depart (a single node).
  virtual std::chrono::milliseconds departure_bound() const = 0;

  // This node gives up (its restarts are used up, or its program cannot
  // start): mark the job failed for every node, then call `done`.
  // `failure`: a job_failed record; the handler sets its node.
  virtual void fail_job(round_record failure, std::function<void()> done) = 0;

  // A person stopped this node (Ctrl-C): end the job on every node. Marks
  // it stopped (`reason`: "by SIGINT (Ctrl-C there)"; the handler adds
  // which node) so that nodes joining later learn it too, ends the current
  // round with a job_stopped record, then calls `done` once both are
  // stored (or could not be). Stopped while a round still gathers, it
  // wakes the nodes that joined it (they fail with job_stopped_error) and
  // drops its own pending next_round(), which is never called. Single
  // node: nothing to tell, `done` at once.
  virtual void stop_job(std::string reason, std::function<void()> done) = 0;

  // This node leaves the job on its own, healthy workers or not (its node
  // health check failed: docs/agent.md, "Node health"): ends the current
  // round on every node with `departure` (a node_left record: its class,
  // health or preemption, and why; the handler sets its node and host), a
  // membership change (no restart is counted: the others rejoin without
  // it, or with a spare), withdraws its will, then calls `done` once the
  // others can read it. It then leaves without next_round(). Before its
  // first round, or single node: nothing to tell, `done` at once.
  virtual void leave_job(round_record departure, std::function<void()> done) = 0;

  // A job-wide checkpoint (--checkpoint-signal; docs/agent.md,
  // "Preemption"): asks every node of the current round to have its
  // workers save one. One request per round: the first, stored by
  // compare_set, wins; later ones change nothing, so a notice that every
  // node got at once is one request. `done(first)` once stored or found
  // there (first: this request was the round's first; false on a store
  // error too). Outside a running round: done(false) at once.
  virtual void request_checkpoint(std::string who, std::function<void(bool first)> done) = 0;

  // Calls `on_request(who)` once, on the loop, when the current round's
  // checkpoint is requested by any node, this one included. Until the
  // round ends; each round needs its own watch. Single node: when this
  // node requests it.
  virtual void watch_checkpoint(std::function<void(std::string who)> on_request) = 0;

  // Quarantine (--quarantine-after; docs/agent.md, "Quarantine"): a
  // machine that keeps failing is kept out of the job for a cooldown. Its
  // record (JSON text, a few hundred bytes) lives in the job's store under
  // its machine key (machine id and GPU UUIDs, not the host name), so an
  // agent started again on that machine finds it.

  // This machine's record, empty when it has none. Connects first when
  // this node is in no round yet. On an error: the error, and "".
  using record_completion = std::function<void(std::exception_ptr error, std::string record)>;
  virtual void read_machine(std::string machine_key, record_completion done) = 0;

  // Stores this machine's record and appends it to the job-wide list that
  // `dtrun status` shows; when this node is in a round, ends it as
  // leave_job() does, with `departure`. `done` once stored, or not (best
  // effort: the node stays out either way).
  virtual void quarantine(std::string machine_key, std::string record, round_record departure,
                          std::function<void()> done) = 0;

  // The job-wide list of quarantine records, oldest first (bounded).
  virtual void quarantine_list(std::function<void(std::vector<std::string> records)> done) = 0;

  // Outside any round (in quarantine): waits until `timeout` passes
  // (done(false, "")) or the job ends: finished, failed, stopped, or its
  // store gone (done(true, why)).
  virtual void wait_outside(std::chrono::milliseconds timeout,
                            std::function<void(bool job_ended, std::string why)> done) = 0;

  // This node learnt that another node stopped the job (a round ended with
  // a job_stopped record): counts it in, so the node that stopped it may
  // leave, then calls `done`. Single node: `done` at once.
  virtual void stop_seen(std::function<void()> done) = 0;

  // This node's workers all succeeded: waits, bounded, for the other
  // nodes to finish too (so the store host does not leave them without a
  // store). Completes with an error when the round ended meanwhile.
  virtual void finish(std::function<void(std::exception_ptr error)> done) = 0;

  // Failure reports, shared so that every node can name the first failure
  // anywhere in the job. `record` is one failed worker as JSON text,
  // bounded by the caller (a few KiB). Completes once stored, or when it
  // could not be (the report is best effort: it never fails the job).
  virtual void publish_failure(std::int64_t round, std::string record,
                               std::function<void()> done) = 0;

  // The records published for `round` by every node; `total` counts all
  // that were published (the store keeps a bounded number). Never fails:
  // on a store error it completes with what it could read.
  using failures_completion =
      std::function<void(std::vector<std::string> records, std::size_t total)>;
  virtual void round_failures(std::int64_t round, failures_completion done) = 0;

  // Hang detection (--hang-timeout): tells the job whether this node's
  // workers progressed since this node last called, and completes with a
  // counter of the current round that grows whenever any node's did. On a
  // store error it does not complete (no hang is declared on a guess).
  virtual void share_progress(bool progressed,
                              std::function<void(std::int64_t counter)> done) = 0;

  // Publishes this node's status (JSON text, a few KiB) where `dtrun
  // status --rdzv-endpoint` finds it: best effort, never fails the job.
  // `stored` is called once the store has it (never on an error).
  virtual void publish_status(std::string status_json, std::function<void()> stored) = 0;

  // --preflight (docs/agent.md, "Preflight"): shares this node's figures
  // (JSON text, a few hundred bytes) with the current round's nodes and
  // completes, on every node, with the round's one verdict (JSON text):
  // the round's node 0 waits up to `timeout` for every node's figures,
  // calls `judge` with them (by group rank; "" where none came) and the
  // round's room, and stores what it returns; the others wait for it
  // twice as long (node 0's wait may start after theirs). O(1) store
  // operations per node, O(n) for node 0, once. "" when no verdict came
  // in time or on a store error (the round's end, if it ended, comes
  // through watch_round). Single node: judge(its own), at once.
  using preflight_judge =
      std::function<std::string(std::vector<std::string> figures, preflight_room room)>;
  virtual void share_preflight(std::string figures, std::chrono::milliseconds timeout,
                               preflight_judge judge,
                               std::function<void(std::string verdict)> done) = 0;

  // Who else the job has, for the agent's /metrics (docs/observability.md,
  // dtrun_nodes): the arrivals and the member count (`closed`) of this
  // node's round, and how many quarantine records the job listed. One
  // read of three keys (O(1) per node and call); absent keys read 0. On a
  // store error, or outside any round, `done` is not called. Single node:
  // itself, at once.
  struct census_counts {
    std::int64_t joined = 0;
    std::int64_t members = 0;
    std::int64_t quarantines = 0;
  };
  virtual void census(std::function<void(census_counts)> done) = 0;

  // Stragglers (docs/stragglers.md). Each node shares its ranks' work
  // figures of the last interval (JSON text, bounded by the caller: about
  // 60 bytes a rank) under a key of the current round, and reads the
  // round's verdict back in the same request; with `gather` (the round's
  // node 0) it also reads every node's figures (one read of `members`
  // keys: O(n) bytes at node 0, O(1) at the others). `done(per_node,
  // verdict, room)`: figures by group rank ("" where a node wrote none;
  // empty without `gather`), the verdict ("" when none), and with `gather`
  // the room the round has to lose a node (as --preflight's; members and
  // min_nodes otherwise). On a store error, or
  // outside any round, `done` is not called. Single node: its own figures
  // and the verdict it last published, at once.
  using work_completion = std::function<void(std::vector<std::string> per_node,
                                             std::string verdict, preflight_room room)>;
  virtual void share_work(std::string node_work, bool gather, work_completion done) = 0;

  // Node 0's verdict (JSON text, bounded by the caller), read back by
  // every node's share_work(); best effort.
  virtual void publish_stragglers(std::string verdict) = 0;
};

}  // namespace dtrun::rendezvous
