// dynamic_rendezvous: its parts, its construction and shutdown, and the
// calls it forwards to the algorithm (dynamic_rendezvous_impl.h).
#include "rendezvous/algorithm/dynamic_rendezvous.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

namespace {

dynamic_rendezvous_options with_default_log(dynamic_rendezvous_options options) {
  if (!options.log) {
    options.log = [](const std::string& line) { fmt::print(stderr, "dtrun: {}\n", line); };
  }
  return options;
}

}  // namespace

rendezvous_parts production_parts(asio::io_context& io, const dynamic_rendezvous_options& o) {
  rendezvous_parts parts;
  parts.os = system_rendezvous_os();
  parts.host = make_tcp_store_host(io,
                                   tcp_store_host_options{
                                       .host_endpoint = o.host_store,
                                       .endpoint_port = o.endpoint_port,
                                       .join_if_port_in_use = o.join_if_store_port_in_use,
                                       .access = o.store_access,
                                       .threads = o.store_threads,
                                   },
                                   o.log);
  if (o.store_factory) {
    parts.connect = external_connector(o.store_factory, o.join_timeout);
  } else {
    parts.connect = c10d_connector(io,
                                   c10d_connector_options{
                                       .endpoint_host = o.endpoint_host,
                                       .endpoint_port = o.endpoint_port,
                                       .hosted_port = parts.host->endpoint_port(),
                                       .join_timeout = o.join_timeout,
                                       .close_timeout = o.close_timeout,
                                   },
                                   o.log);
  }
  return parts;
}

dynamic_rendezvous::impl::impl(asio::io_context& io, dynamic_rendezvous_options options,
                               rendezvous_parts parts)
    : io_(io),
      options_(with_default_log(std::move(options))),
      unheeded_(options_.log),
      keys_(options_.run_id),
      os_(std::move(parts.os)),
      host_(std::move(parts.host)),
      connect_(std::move(parts.connect)),
      ring_(std::make_shared<heartbeat_ring>(
          io, heartbeat_ring::settings{.interval = options_.keep_alive_interval,
                                       .max_attempt = options_.keep_alive_max_attempt})),
      deadline_timer_(io),
      warning_timer_(io),
      barrier_timer_(io) {}

void dynamic_rendezvous::impl::end_here() {
  if (phase_ != round_phase::shut_down) phase_ = round_phase::over;
  ring_->stop();
}

void dynamic_rendezvous::impl::fail(std::exception_ptr error) {
  if (join_again(error)) return;
  deadline_timer_.cancel();
  warning_timer_.cancel();
  if (phase_ == round_phase::joining) phase_ = round_phase::idle;
  // The failure handed on is the last word of this round: a write of it
  // failing later (the store gone, a short timeout) is not logged below it.
  if (error) unheeded_.silence();
  if (auto done = std::exchange(done_, nullptr)) done(error, {});
}

std::chrono::milliseconds dynamic_rendezvous::impl::bounded(std::chrono::milliseconds d) {
  return std::clamp<std::chrono::milliseconds>(d, std::chrono::milliseconds::zero(), no_timeout);
}

void dynamic_rendezvous::impl::shutdown() {
  unheeded_.silence();
  ring_->stop();
  deadline_timer_.cancel();
  warning_timer_.cancel();
  barrier_timer_.cancel();
  phase_ = round_phase::shut_down;
  if (ops_) ops_->close();
  if (waits_) waits_->close();
  close_checkpoint_watch();
  close_preflight_clients();
  host_->stop();
}

// --- the facade -------------------------------------------------------------

dynamic_rendezvous::dynamic_rendezvous(asio::io_context& io, dynamic_rendezvous_options options)
    : dynamic_rendezvous(io, with_default_log(options),
                         production_parts(io, with_default_log(options))) {}

dynamic_rendezvous::dynamic_rendezvous(asio::io_context& io, dynamic_rendezvous_options options,
                                       rendezvous_parts parts)
    : impl_(std::make_shared<impl>(io, std::move(options), std::move(parts))) {}

dynamic_rendezvous::~dynamic_rendezvous() { impl_->shutdown(); }

void dynamic_rendezvous::next_round(completion done) { impl_->next_round(std::move(done)); }
const std::string& dynamic_rendezvous::run_id() const { return impl_->options().run_id; }
void dynamic_rendezvous::shutdown() { impl_->shutdown(); }
void dynamic_rendezvous::watch_round(std::function<void(round_record)> on_over) {
  impl_->watch_round(std::move(on_over));
}
void dynamic_rendezvous::report_failure(round_record failure, restart_completion done) {
  impl_->report_failure(std::move(failure), std::move(done));
}
std::chrono::milliseconds dynamic_rendezvous::departure_bound() const {
  return impl_->departure_bound();
}
void dynamic_rendezvous::fail_job(round_record failure, std::function<void()> done) {
  impl_->fail_job(std::move(failure), std::move(done));
}
void dynamic_rendezvous::stop_job(std::string reason, std::function<void()> done) {
  impl_->stop_job(std::move(reason), std::move(done));
}
void dynamic_rendezvous::stop_seen(std::function<void()> done) {
  impl_->stop_seen(std::move(done));
}

void dynamic_rendezvous::leave_job(round_record departure, std::function<void()> done) {
  impl_->leave_job(std::move(departure), std::move(done));
}

void dynamic_rendezvous::request_checkpoint(std::string who, std::function<void(bool)> done) {
  impl_->request_checkpoint(std::move(who), std::move(done));
}

void dynamic_rendezvous::watch_checkpoint(std::function<void(std::string)> on_request) {
  impl_->watch_checkpoint(std::move(on_request));
}

void dynamic_rendezvous::read_machine(std::string machine_key, record_completion done) {
  impl_->read_machine(std::move(machine_key), std::move(done));
}

void dynamic_rendezvous::quarantine(std::string machine_key, std::string record,
                                    round_record departure, std::function<void()> done) {
  impl_->quarantine(std::move(machine_key), std::move(record), std::move(departure),
                    std::move(done));
}

void dynamic_rendezvous::quarantine_list(std::function<void(std::vector<std::string>)> done) {
  impl_->quarantine_list(std::move(done));
}

void dynamic_rendezvous::wait_outside(std::chrono::milliseconds timeout,
                                      std::function<void(bool, std::string)> done) {
  impl_->wait_outside(timeout, std::move(done));
}
void dynamic_rendezvous::finish(std::function<void(std::exception_ptr)> done) {
  impl_->finish(std::move(done));
}
void dynamic_rendezvous::publish_failure(std::int64_t round, std::string record,
                                         std::function<void()> done) {
  impl_->publish_failure(round, std::move(record), std::move(done));
}
void dynamic_rendezvous::round_failures(std::int64_t round, failures_completion done) {
  impl_->round_failures(round, std::move(done));
}
void dynamic_rendezvous::share_progress(bool progressed,
                                        std::function<void(std::int64_t)> done) {
  impl_->share_progress(progressed, std::move(done));
}
void dynamic_rendezvous::publish_status(std::string status_json, std::function<void()> stored) {
  impl_->publish_status(std::move(status_json), std::move(stored));
}

void dynamic_rendezvous::census(std::function<void(census_counts)> done) {
  impl_->census(std::move(done));
}
void dynamic_rendezvous::share_work(std::string node_work, bool gather, work_completion done) {
  impl_->share_work(std::move(node_work), gather, std::move(done));
}
void dynamic_rendezvous::publish_stragglers(std::string verdict) {
  impl_->publish_stragglers(std::move(verdict));
}

void dynamic_rendezvous::share_preflight(std::string figures, std::chrono::milliseconds timeout,
                                         preflight_judge judge,
                                         std::function<void(std::string)> done) {
  impl_->share_preflight(std::move(figures), timeout, std::move(judge), std::move(done));
}
store_server_stats dynamic_rendezvous::store_stats() const { return impl_->host().stats(); }
std::uint16_t dynamic_rendezvous::worker_store_port() const {
  return impl_->host().worker_store_port();
}
std::uint16_t dynamic_rendezvous::store_port() const { return impl_->host().endpoint_port(); }

}  // namespace dtrun::rendezvous
