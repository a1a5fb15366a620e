#include "rendezvous/algorithm/standalone_rendezvous.h"

#include <cstddef>
#include <memory>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/store/store.h"

namespace dtrun::rendezvous {

standalone_rendezvous::standalone_rendezvous(boost::asio::io_context& io,
                                             standalone_rendezvous_options options)
    : io_(io), options_(std::move(options)) {
  // Fail the launch with one line, rather than refuse every worker, where
  // the same-user rule cannot work (no socket diagnostics in a sandbox).
  if (auto why = same_user_rule_unavailable(options_.access); !why.empty()) {
    throw store_error(why);
  }
  store_server_options server_options;
  server_options.host = options_.host;
  server_options.port = options_.port;
  server_options.admit = make_admit(options_.access);
  server_ = std::make_unique<store_server>(io_, std::move(server_options));
}

standalone_rendezvous::~standalone_rendezvous() = default;

std::uint16_t standalone_rendezvous::store_port() const { return server_->port(); }

void standalone_rendezvous::next_round(completion done) {
  rendezvous_info info;
  info.round = next_round_++;
  // Each round's workers start on an empty store. torch >= 2.6 workers no
  // longer put their keys under /worker/attempt_<restart> (torch expects a
  // new store per retry), so a restarted group would find the previous
  // round's keys (gloo's peer addresses, NCCL's unique id) and connect to
  // dead peers: torchrun 2.6 --standalone fails such restarts that way.
  // Every worker of the last round has exited by now (the agent starts a
  // round only once the group is reaped), and the standalone store holds
  // nothing of dtrun's own.
  if (info.round > 0) server_->clear_keys();
  info.group_rank = 0;
  info.group_world_size = 1;
  info.local_world_size = options_.local_world_size;
  info.world_size = options_.local_world_size;
  info.master_addr = options_.host;
  info.master_port = server_->port();
  info.store_host = options_.host;
  info.store_port = server_->port();
  // Posted, not called inline: the contract says completion comes from the
  // loop, so callers never re-enter themselves.
  boost::asio::post(io_, [done = std::move(done), info = std::move(info)]() mutable {
    done(nullptr, std::move(info));
  });
}

void standalone_rendezvous::shutdown() {
  if (server_) server_->stop();
}

// No other node to end the round.
void standalone_rendezvous::watch_round(std::function<void(round_record)> on_over) {
  (void)on_over;
}

// This node's restarts are the job's.
void standalone_rendezvous::report_failure(round_record failure, restart_completion done) {
  (void)failure;
  done(nullptr, failure_verdict{++local_restarts_, std::nullopt});
}

void standalone_rendezvous::fail_job(round_record failure, std::function<void()> done) {
  (void)failure;
  done();
}

void standalone_rendezvous::stop_job(std::string reason, std::function<void()> done) {
  (void)reason;
  done();
}

void standalone_rendezvous::stop_seen(std::function<void()> done) { done(); }

void standalone_rendezvous::leave_job(round_record, std::function<void()> done) { done(); }

// The only node: its request is the round's when it is the first, and its
// own watch hears it (posted, as a store's reply would come).
void standalone_rendezvous::request_checkpoint(std::string who,
                                               std::function<void(bool)> done) {
  auto round = next_round_ - 1;
  if (round < 0 || checkpoint_round_ == round) return done(false);
  checkpoint_round_ = round;
  if (auto watch = std::exchange(on_checkpoint_, nullptr)) {
    boost::asio::post(io_, [watch, who] { watch(who); });
  }
  done(true);
}

void standalone_rendezvous::watch_checkpoint(std::function<void(std::string)> on_request) {
  on_checkpoint_ = std::move(on_request);
}

// A single node has no one to keep it out: its quarantine is only its own
// wait (the agent's), which a timer makes.
void standalone_rendezvous::read_machine(std::string, record_completion done) {
  done(nullptr, {});
}

void standalone_rendezvous::quarantine(std::string, std::string record, round_record,
                                       std::function<void()> done) {
  quarantined_.push_back(std::move(record));
  done();
}

void standalone_rendezvous::quarantine_list(std::function<void(std::vector<std::string>)> done) {
  done(quarantined_);
}

void standalone_rendezvous::wait_outside(std::chrono::milliseconds timeout,
                                         std::function<void(bool, std::string)> done) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, timeout);
  timer->async_wait([timer, done](const boost::system::error_code&) { done(false, {}); });
}

// Nobody else needs the store.
void standalone_rendezvous::finish(std::function<void(std::exception_ptr)> done) {
  done(nullptr);
}

void standalone_rendezvous::publish_failure(std::int64_t round, std::string record,
                                            std::function<void()> done) {
  local_failures_[round].push_back(std::move(record));
  done();
}

void standalone_rendezvous::round_failures(std::int64_t round, failures_completion done) {
  auto it = local_failures_.find(round);
  std::vector<std::string> records;
  if (it != local_failures_.end()) records = it->second;
  std::size_t total = records.size();
  done(std::move(records), total);
}

void standalone_rendezvous::share_progress(bool progressed,
                                           std::function<void(std::int64_t)> done) {
  if (progressed) ++local_progress_;
  done(local_progress_);
}

// No rendezvous store for `dtrun status --rdzv-endpoint` to read.
void standalone_rendezvous::publish_status(std::string status_json,
                                           std::function<void()> stored) {
  (void)status_json;
  (void)stored;
}

// The whole job is this node: no spares, nothing in quarantine.
void standalone_rendezvous::census(std::function<void(census_counts)> done) {
  done({1, 1, 0});
}

void standalone_rendezvous::share_work(std::string node_work, bool gather,
                                       work_completion done) {
  std::vector<std::string> per_node;
  if (gather) per_node.push_back(std::move(node_work));
  done(std::move(per_node), local_verdict_, preflight_room{1, 0, 1});
}

void standalone_rendezvous::publish_stragglers(std::string verdict) {
  local_verdict_ = std::move(verdict);
}

// The whole job is this node: its figures are all the judge gets.
void standalone_rendezvous::share_preflight(std::string figures, std::chrono::milliseconds,
                                            preflight_judge judge,
                                            std::function<void(std::string)> done) {
  done(judge({std::move(figures)}, preflight_room{1, 0, 1}));
}

}  // namespace dtrun::rendezvous
