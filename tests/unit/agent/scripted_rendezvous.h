// A rendezvous_handler for the agent's policy tests: every round completes
// at once (posted) with the info the test set, and every multi-node event
// is the test's to trigger or inspect. In memory, single-threaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/record/round_record.h"

namespace dtrun::agent::testing {

// The words of a record the agent handed over, as the tests compare them:
// a failure's with its class tag ("worker rank 1 exited with code 1
// [exit]"), a refusal's or a departure's detail.
inline std::string words(const records::round_record& r) {
  if (r.kind == records::record_kind::worker_failed && r.klass) {
    return r.detail + " " + records::class_tag(*r.klass, r.exception_type);
  }
  return r.detail;
}

class scripted_rendezvous : public rendezvous::rendezvous_handler {
 public:
  scripted_rendezvous(boost::asio::io_context& io, int local_world_size) : io_(io) {
    info.local_world_size = local_world_size;
    info.world_size = local_world_size;
    info.master_addr = "127.0.0.1";
    info.master_port = 29500;
    info.store_host = "127.0.0.1";
    info.store_port = 29500;
  }

  // The next round's info (its `round` is counted here).
  rendezvous::rendezvous_info info;
  // The next next_round() fails with this instead.
  std::exception_ptr next_error;
  // report_failure() fails (the store cannot be reached).
  bool failure_reports_fail = false;

  // What the agent did.
  std::int64_t rounds_started = 0;
  std::vector<std::string> failures_reported;
  std::vector<std::string> job_failures;
  std::vector<std::string> stops;
  std::vector<std::string> departures;  // leave_job() reasons
  // The same, as the records the agent handed over.
  std::vector<records::round_record> failure_records, job_failure_records, departure_records;
  bool was_shut_down = false;
  int restarts = 0;  // the job's count, as the store keeps it
  // What departure_bound() says (0: the agent holds no failure).
  std::chrono::milliseconds bound{0};

  // Another node ends the round (it failed, died or wants in). The first
  // end of a round is the one report_failure() finds, as in the store.
  void end_round(const records::round_record& end) {
    if (!ended_with_) ended_with_ = end;
    auto on_over = std::exchange(on_over_, nullptr);
    if (on_over) boost::asio::post(io_, [on_over, end] { on_over(end); });
  }
  bool watching() const { return static_cast<bool>(on_over_); }

  void next_round(completion done) override {
    rendezvous::rendezvous_info round = info;
    round.round = rounds_started++;
    ended_with_.reset();
    std::exception_ptr error = std::exchange(next_error, nullptr);
    boost::asio::post(io_, [done, round, error] { done(error, round); });
  }
  const std::string& run_id() const override { return run_id_; }
  void shutdown() override { was_shut_down = true; }
  void watch_round(std::function<void(records::round_record)> on_over) override {
    on_over_ = std::move(on_over);
  }
  // The round's first end decides (dynamic_rendezvous): this failure is
  // counted, another node's failure was, anything else counts nothing.
  void report_failure(records::round_record failure, restart_completion done) override {
    failures_reported.push_back(words(failure));
    failure.node = info.group_rank;
    failure_records.push_back(failure);
    if (failure_reports_fail) {
      auto error = std::make_exception_ptr(std::runtime_error("the store is unreachable"));
      return boost::asio::post(io_, [done, error] { done(error, {}); });
    }
    failure_verdict verdict{restarts, std::nullopt};
    if (!ended_with_) {
      ended_with_ = failure;
      verdict.restarts = ++restarts;
    } else if (!records::is_failure(*ended_with_)) {
      verdict.ended_by = ended_with_;
    }
    on_over_ = nullptr;  // our own end: the watch is not called
    boost::asio::post(io_, [done, verdict] { done(nullptr, verdict); });
  }
  std::chrono::milliseconds departure_bound() const override { return bound; }
  void fail_job(records::round_record failure, std::function<void()> done) override {
    job_failures.push_back(words(failure));
    job_failure_records.push_back(std::move(failure));
    boost::asio::post(io_, std::move(done));
  }
  void stop_job(std::string reason, std::function<void()> done) override {
    stops.push_back(std::move(reason));
    boost::asio::post(io_, std::move(done));
  }
  void stop_seen(std::function<void()> done) override { boost::asio::post(io_, std::move(done)); }
  // Quarantine: records by machine key, in memory; wait_outside ends at
  // once (the test's clock is not real) unless job_ends_outside says.
  std::map<std::string, std::string> machines;
  std::vector<std::string> quarantine_records;
  std::vector<std::string> quarantine_reasons;
  std::vector<std::chrono::milliseconds> outside_waits;
  bool job_ends_outside = false;
  bool outside_never_ends = false;  // wait_outside never completes
  void read_machine(std::string key, record_completion done) override {
    auto it = machines.find(key);
    std::string record = it == machines.end() ? std::string() : it->second;
    boost::asio::post(io_, [done, record] { done(nullptr, record); });
  }
  void quarantine(std::string key, std::string record, records::round_record departure,
                  std::function<void()> done) override {
    machines[key] = record;
    quarantine_records.push_back(record);
    quarantine_reasons.push_back(words(departure));
    boost::asio::post(io_, std::move(done));
  }
  void quarantine_list(std::function<void(std::vector<std::string>)> done) override {
    boost::asio::post(io_, [done, list = quarantine_records] { done(list); });
  }
  void wait_outside(std::chrono::milliseconds timeout,
                    std::function<void(bool, std::string)> done) override {
    outside_waits.push_back(timeout);
    if (outside_never_ends) return;
    bool ended = job_ends_outside;
    boost::asio::post(io_, [done, ended] { done(ended, ended ? "the job finished" : ""); });
  }
  void leave_job(records::round_record departure, std::function<void()> done) override {
    departures.push_back(words(departure));
    departure_records.push_back(std::move(departure));
    boost::asio::post(io_, std::move(done));
  }
  // Job-wide checkpoints: the requests made here, and the round's watch;
  // the first request of a round is the round's, as in the store.
  std::vector<std::string> checkpoint_requests;
  bool checkpoint_store_lost = false;  // requests are never answered nor seen
  void request_checkpoint(std::string who, std::function<void(bool)> done) override {
    checkpoint_requests.push_back(who);
    if (checkpoint_store_lost) return;
    bool first = checkpoint_round_ != rounds_started;
    checkpoint_round_ = rounds_started;
    if (first) request_checkpoint_elsewhere(who);
    boost::asio::post(io_, [done, first] { done(first); });
  }
  void watch_checkpoint(std::function<void(std::string)> on_request) override {
    on_checkpoint_ = std::move(on_request);
  }
  // Another node asks for the round's checkpoint (or this one did).
  void request_checkpoint_elsewhere(const std::string& who) {
    auto watch = std::exchange(on_checkpoint_, nullptr);
    if (watch) boost::asio::post(io_, [watch, who] { watch(who); });
  }
  void finish(std::function<void(std::exception_ptr)> done) override {
    boost::asio::post(io_, [done] { done(nullptr); });
  }
  void publish_failure(std::int64_t round, std::string record,
                       std::function<void()> done) override {
    published_[round].push_back(std::move(record));
    boost::asio::post(io_, std::move(done));
  }
  void round_failures(std::int64_t round, failures_completion done) override {
    auto records = published_[round];
    boost::asio::post(io_, [done, records] { done(records, records.size()); });
  }
  // No node progressed: the counter stays, so --hang-timeout can fire.
  void share_progress(bool progressed, std::function<void(std::int64_t)> done) override {
    if (progressed) ++progress_;
    boost::asio::post(io_, [done, counter = progress_] { done(counter); });
  }
  // Each status the agent published (dtrun.status/1 JSON), in order.
  std::vector<std::string> statuses;
  void publish_status(std::string status, std::function<void()> stored) override {
    statuses.push_back(std::move(status));
    boost::asio::post(io_, std::move(stored));
  }
  // What census() reports (a test sets it); quarantines counts the list.
  census_counts counts{1, 1, 0};
  void census(std::function<void(census_counts)> done) override {
    auto c = counts;
    c.quarantines = static_cast<std::int64_t>(quarantine_records.size());
    boost::asio::post(io_, [done, c] { done(c); });
  }
  // share_work(): what this node shared, in order; what the other nodes
  // shared (a test sets it: by group rank, this node's slot filled in);
  // the verdicts published, the last one read back.
  std::vector<std::string> works;
  std::vector<std::string> other_works;
  std::vector<std::string> verdicts;
  void share_work(std::string node_work, bool gather, work_completion done) override {
    works.push_back(node_work);
    std::vector<std::string> per_node;
    if (gather) {
      per_node = other_works;
      per_node.push_back(std::move(node_work));
    }
    std::string verdict = verdicts.empty() ? std::string() : verdicts.back();
    boost::asio::post(io_, [this, done, per_node = std::move(per_node), verdict]() mutable {
      done(std::move(per_node), std::move(verdict), room);
    });
  }
  void publish_stragglers(std::string verdict) override { verdicts.push_back(std::move(verdict)); }
  // --preflight: the figures this node shared, and the room the judge
  // gets (a test sets it); the judge sees this node's figures alone.
  std::vector<std::string> preflight_figures;
  rendezvous::preflight_room room{1, 0, 1};
  void share_preflight(std::string figures, std::chrono::milliseconds, preflight_judge judge,
                       std::function<void(std::string)> done) override {
    preflight_figures.push_back(figures);
    auto verdict = judge({std::move(figures)}, room);
    boost::asio::post(io_, [done, verdict] { done(verdict); });
  }

 private:
  boost::asio::io_context& io_;
  std::string run_id_ = "policy-test";
  std::function<void(records::round_record)> on_over_;
  std::optional<records::round_record> ended_with_;  // the round's first end
  std::map<std::int64_t, std::vector<std::string>> published_;
  std::int64_t progress_ = 0;
  std::function<void(std::string)> on_checkpoint_;
  std::int64_t checkpoint_round_ = -1;
};

}  // namespace dtrun::agent::testing
