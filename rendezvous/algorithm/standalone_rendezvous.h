// The rendezvous of a single-node run: one node, group rank 0, and a store
// on loopback that the workers use (TORCHELASTIC_USE_AGENT_STORE=True).
//
// The store server runs on the agent's event loop; this handler only
// hosts it and reports its address, so it never blocks the loop.
//
// A single node is the whole job: its restarts are the job's, its failure
// reports and progress are kept here, nobody else needs telling when it
// stops or fails, and nobody else needs the store when it is done. The
// multi-node events complete inline.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/store/store_access.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::rendezvous {

struct standalone_rendezvous_options {
  std::string run_id;
  // Workers per node (this node is the only one).
  int local_world_size = 1;
  // Loopback only: a standalone job must not be reachable from outside.
  std::string host = "127.0.0.1";
  // 0 picks a free port (no EADDRINUSE races on a fixed port).
  std::uint16_t port = 0;
  // Who may connect: by default only this user's processes, since any
  // local user can reach loopback (docs/store.md, "Who may connect").
  store_access_options access{.same_user_only = true};
};

class standalone_rendezvous final : public rendezvous_handler {
 public:
  // Binds the store at once; throws store_error with an actionable message
  // when the port cannot be bound.
  standalone_rendezvous(boost::asio::io_context& io, standalone_rendezvous_options options);
  ~standalone_rendezvous() override;

  void next_round(completion done) override;
  const std::string& run_id() const override { return options_.run_id; }
  void shutdown() override;

  void watch_round(std::function<void(round_record end)> on_over) override;
  void report_failure(round_record failure, restart_completion done) override;
  // No other node to lose.
  std::chrono::milliseconds departure_bound() const override { return {}; }
  void fail_job(round_record failure, std::function<void()> done) override;
  void stop_job(std::string reason, std::function<void()> done) override;
  void stop_seen(std::function<void()> done) override;
  void leave_job(round_record departure, std::function<void()> done) override;
  void request_checkpoint(std::string who, std::function<void(bool)> done) override;
  void watch_checkpoint(std::function<void(std::string)> on_request) override;
  void read_machine(std::string machine_key, record_completion done) override;
  void quarantine(std::string machine_key, std::string record, round_record departure,
                  std::function<void()> done) override;
  void quarantine_list(std::function<void(std::vector<std::string>)> done) override;
  void wait_outside(std::chrono::milliseconds timeout,
                    std::function<void(bool, std::string)> done) override;
  void finish(std::function<void(std::exception_ptr error)> done) override;
  void publish_failure(std::int64_t round, std::string record,
                       std::function<void()> done) override;
  void round_failures(std::int64_t round, failures_completion done) override;
  void share_progress(bool progressed, std::function<void(std::int64_t counter)> done) override;
  void publish_status(std::string status_json, std::function<void()> stored) override;
  void census(std::function<void(census_counts)> done) override;
  void share_work(std::string node_work, bool gather, work_completion done) override;
  void publish_stragglers(std::string verdict) override;
  void share_preflight(std::string figures, std::chrono::milliseconds timeout,
                       preflight_judge judge, std::function<void(std::string)> done) override;

  std::uint16_t store_port() const;

 private:
  boost::asio::io_context& io_;
  standalone_rendezvous_options options_;
  std::unique_ptr<store_server> server_;
  std::int64_t next_round_ = 0;
  std::int64_t local_progress_ = 0;
  std::string local_verdict_;  // publish_stragglers()'s last
  int local_restarts_ = 0;
  std::map<std::int64_t, std::vector<std::string>> local_failures_;
  std::vector<std::string> quarantined_;  // this node's quarantine records
  // --checkpoint-signal: the round's watch, and the round last asked for
  // a checkpoint (one per round, as on several nodes).
  std::function<void(std::string)> on_checkpoint_;
  std::int64_t checkpoint_round_ = -1;
};

}  // namespace dtrun::rendezvous
