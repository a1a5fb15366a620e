// The rendezvous algorithm behind dynamic_rendezvous (docs/rendezvous.md),
// private to rendezvous/algorithm. One object per node, on the agent's
// event loop; its I/O goes through its parts (rendezvous_parts): the
// round_store clients a connector opens, the store_host, the OS interface.
// Its member functions live in files of one job each:
//   dynamic_rendezvous.cpp  construction, the parts, shutdown
//   round_join.cpp          next_round: connect, read the job, join, close
//   round_close.cpp         await the close, latecomers, the round's info
//   round_run.cpp           while the round runs: `over`, the ring,
//                           failures, progress, status
//   round_leave.cpp         the exit barrier, stopping, leaving
//   round_quarantine.cpp    a machine kept out: its record, the list,
//                           waiting outside any round
//   round_return.cpp        a restart round closes once every node that
//                           can come is back (returning_nodes.h)
//   round_checkpoint.cpp    a job-wide checkpoint: its request, its watch
//
// Completion handlers do not throw; every value read from the store is
// parsed with a guard.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/heartbeat_ring.h"
#include "rendezvous/algorithm/rank_table.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/algorithm/returning_nodes.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::rendezvous {

// Where this node stands in its current round. Replaces the flags of old
// (round_over_, all_done_, whichever callback was pending): each phase says
// what may still happen, and the data it owns is named beside it.
enum class round_phase {
  idle,       // no round asked for yet
  joining,    // next_round() runs; owns done_ (until it completes)
  running,    // ranked; the WAIT on `over` stands; on_over_ may be set
  finishing,  // in the exit barrier; owns finish_done_
  released,   // every node finished: a lost store now is the job's end
  over,       // the round ended (told by `over`, or ended here: a failure,
              // fail_job, a stop); owns pending_over_ until the agent
              // watches
  shut_down,  // shutdown(): nothing more happens
};

// What a callback was issued for: the next_round() call (epoch) and the
// round. A reply or expiry acts only while both are still current.
struct round_ticket {
  std::uint64_t epoch = 0;
  std::int64_t round = -1;
};

class dynamic_rendezvous::impl : public std::enable_shared_from_this<dynamic_rendezvous::impl> {
 public:
  impl(boost::asio::io_context& io, dynamic_rendezvous_options options, rendezvous_parts parts);

  // --- rendezvous_handler's calls (dynamic_rendezvous.h) -------------------
  void next_round(completion done);
  void watch_round(std::function<void(round_record)> on_over);
  void report_failure(round_record failure, restart_completion done);
  void fail_job(round_record failure, std::function<void()> done);
  void stop_job(std::string reason, std::function<void()> done);
  void stop_seen(std::function<void()> done);
  void leave_job(round_record departure, std::function<void()> done);
  void request_checkpoint(std::string who, std::function<void(bool)> done);
  void watch_checkpoint(std::function<void(std::string)> on_request);
  void read_machine(std::string machine_key, record_completion done);
  void quarantine(std::string machine_key, std::string record, round_record departure,
                  std::function<void()> done);
  void quarantine_list(std::function<void(std::vector<std::string>)> done);
  void wait_outside(std::chrono::milliseconds timeout,
                    std::function<void(bool, std::string)> done);
  void finish(std::function<void(std::exception_ptr)> done);
  void publish_failure(std::int64_t r, std::string record, std::function<void()> done);
  void round_failures(std::int64_t r, failures_completion done);
  void share_progress(bool progressed, std::function<void(std::int64_t)> done);
  void publish_status(std::string status_json, std::function<void()> stored);
  void census(std::function<void(rendezvous_handler::census_counts)> done);
  void share_work(std::string node_work, bool gather, rendezvous_handler::work_completion done);
  void publish_stragglers(std::string verdict);
  void share_preflight(std::string figures, std::chrono::milliseconds timeout,
                       rendezvous_handler::preflight_judge judge,
                       std::function<void(std::string)> done);
  void shutdown();

  std::chrono::milliseconds departure_bound() const;
  const dynamic_rendezvous_options& options() const { return options_; }
  const store_host& host() const { return *host_; }

 private:
  // --- the one check of every callback -------------------------------------
  round_ticket ticket() const { return {epoch_, round_}; }
  // The call and round the callback was issued for are still current.
  bool current(const round_ticket& t) const { return t.epoch == epoch_ && t.round == round_; }
  // ... and the round has not ended (nor the handler been shut down).
  bool still_running(const round_ticket& t) const {
    return current(t) && phase_ != round_phase::over && phase_ != round_phase::shut_down;
  }
  // Ends the round here (our own doing: the agent is not told by on_over).
  void end_here();
  bool hosting() const { return host_->endpoint_port() != 0; }
  bool external_store() const { return static_cast<bool>(options_.store_factory); }

  // --- round_join.cpp -------------------------------------------------------
  void abandon_pending_call();
  void reconnect(std::function<void(std::exception_ptr)> then);
  void connected(std::exception_ptr error, const std::function<void(std::exception_ptr)>& then);
  void warn_if_no_host();
  // `at_least`: the round to join at the earliest (a latecomer's next).
  void read_job(const round_ticket& t, std::int64_t at_least = -1);
  void await_failure_count(const round_ticket& t, std::function<void()> then);
  void report_job_failed();
  void join(std::int64_t r);
  void joined(std::int64_t r, int index);

  // --- round_session_lost.cpp -------------------------------------------------
  bool join_again(const std::exception_ptr& why);
  void resume_arrival(std::int64_t r, int index);
  node_descriptor describe_self(int worker_store_port) const;
  void arm_last_call(std::int64_t r);
  // `why`, when given, is logged if this node's count closes the round.
  void close_round(std::int64_t r, int members, std::string why = {});
  void publish_ranks(std::int64_t r, int members);
  int open_worker_store(std::int64_t r);

  // --- round_close.cpp ------------------------------------------------------
  void await_close(std::int64_t r);
  void join_timed_out(std::int64_t r, const store_result& failure);
  void read_assignment(std::int64_t r);
  void wait_for_next_round(std::int64_t r, int members);
  void stopped_while_joining(std::int64_t r, std::string who);
  bool fail_if_stopped(const round_record& over);
  // Without `done`, a failure is logged once (unheeded_).
  void end_round_first(std::int64_t r, const round_record& end, store_callback done = {});
  // The round's assignment says an older dtrun is in it (docs/rendezvous.md,
  // "Mixed versions"): fail the job in words it reads, and refuse here.
  void refuse_mixed_versions(std::int64_t r, int theirs, const std::string& where);
  void fail_job_finished(std::int64_t r);
  void fail_corrupt_count(std::int64_t r);
  void complete_round(std::int64_t r, int members, const std::string& assignment_text);
  void point_workers(rendezvous_info& info, const rank_assignment& mine, std::int64_t r);
  void start_round(std::int64_t r, const rank_assignment& mine);

  // --- round_run.cpp --------------------------------------------------------
  void watch_over(std::int64_t r);
  void round_ended(std::int64_t r, round_record end);
  void watch_successor(std::int64_t r, int successor_arrival);
  std::string lost_store_reason(const std::exception_ptr& error) const;
  void count_restart(std::int64_t r, std::string failure_text, restart_completion done);
  // `failure_text`: the job_failed (or worker_failed) record as stored.
  void mark_job_failed(const std::string& failure_text);
  void mark_failures_read(std::int64_t r, std::function<void()> done);

  // --- round_return.cpp -----------------------------------------------------
  void count_returner(std::int64_t r, int index);
  void fix_returning(std::int64_t r, int index, std::int64_t arrivals, const std::string& over);
  void check_everyone_here(std::int64_t r);
  void close_if_enough(std::int64_t r, const returning_nodes& expected);

  // --- round_quarantine.cpp -------------------------------------------------
  void outside_connected(std::function<void(std::exception_ptr)> then);

  // --- round_checkpoint.cpp -------------------------------------------------
  void close_checkpoint_watch();

  // --- round_preflight.cpp --------------------------------------------------
  void judge_preflight(std::int64_t r, std::chrono::milliseconds timeout,
                       rendezvous_handler::preflight_judge judge,
                       std::function<void(std::string)> done);
  void close_preflight_clients();

  // --- round_leave.cpp ------------------------------------------------------
  void await_stop_seen(std::function<void()> done);
  void wake_joiners(std::function<void()> done);
  void count_stop_seen(std::function<void(bool last)> done);
  void leave(std::int64_t r, bool everyone_done);
  void await_all_left(std::int64_t r);
  void release_job(std::function<void()> done);
  void finish_with(std::exception_ptr error);

  // --- dynamic_rendezvous.cpp -----------------------------------------------
  void fail(std::exception_ptr error);
  // A timer setting that cannot overflow the clock, whatever value the
  // options hold: negative is "now", beyond no_timeout is no_timeout.
  static std::chrono::milliseconds bounded(std::chrono::milliseconds d);
  void log(const std::string& line) const { options_.log(line); }

  boost::asio::io_context& io_;
  dynamic_rendezvous_options options_;
  // The callbacks of the writes nobody waits for: each failure logged once.
  unheeded_writes unheeded_;
  rendezvous_keys keys_;
  std::shared_ptr<const rendezvous_os> os_;
  std::unique_ptr<store_host> host_;
  round_store_connector connect_;
  std::shared_ptr<round_store> ops_, waits_;
  std::shared_ptr<heartbeat_ring> ring_;
  generation_timer deadline_timer_, warning_timer_, barrier_timer_;

  // The round's state.
  round_phase phase_ = round_phase::idle;
  std::uint64_t epoch_ = 0;  // next_round() calls so far
  std::int64_t round_ = -1;  // the round joined or being joined
  std::int64_t last_round_ = -1;  // the last round this node was ranked in
  int arrival_ = 0, group_rank_ = -1, members_ = 0;
  // This next_round() call's join: the round it has arrived in (-1: none
  // yet), and how long and how often it may take a new store session
  // (round_session_lost.cpp).
  std::int64_t arrived_round_ = -1;
  std::chrono::steady_clock::time_point join_deadline_;
  int sessions_taken_ = 0;
  // Where this node comes from when it joins a round: the round it last
  // joined (-1: none), its arrival index there and its group rank there
  // (-1: it waited as a spare). Set by join() from the round it leaves.
  std::int64_t from_round_ = -1;
  int from_arrival_ = 0, from_rank_ = -1;
  bool waiting_as_spare_ = false;  // arrived when the job was full (wait_for_next_round)
  std::string advertised_addr_;
  completion done_;  // the pending next_round() call
  std::function<void(round_record)> on_over_;  // the agent's watch of the round
  std::optional<round_record> pending_over_;  // the round's end, before the agent watched
  // The round another node's failure ended (-1: none): the next round reads
  // the job's state only once that failure is counted (await_failure_count).
  std::int64_t failure_ended_round_ = -1;
  std::function<void(std::exception_ptr)> finish_done_;  // the exit barrier's caller
  // The watch of the round's checkpoint request (watch_checkpoint): clients
  // of their own, since the watch lane already holds the WAIT on `over`.
  round_store_clients checkpoint_watch_;
  std::int64_t checkpoint_asked_round_ = -1;  // the round this node last asked in
  // --preflight's waits (share_preflight), on clients of their own for the
  // same reason; closed once it completes or the next round connects.
  round_store_clients preflight_clients_;

  friend class dynamic_rendezvous;
};

}  // namespace dtrun::rendezvous
