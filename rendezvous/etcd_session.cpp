#include "rendezvous/etcd_session.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// etcd writes 64-bit integers as strings; older gateways as numbers.
std::string integer_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_integer()) return std::to_string(j.get<std::int64_t>());
  return {};
}

}  // namespace

etcd_session::etcd_session(asio::io_context& io, etcd_options options,
                           std::shared_ptr<asio::ssl::context> tls)
    : io_(io), options_(std::move(options)), tls_(std::move(tls)), timer_(io) {}

etcd_session::~etcd_session() {
  closed_ = true;
  if (connection_) connection_->close();
}

void etcd_session::acquire(std::chrono::steady_clock::time_point deadline,
                           std::function<void(std::string)> done) {
  if (closed_) {
    asio::post(io_, [done] { done("the etcd session was closed"); });
    return;
  }
  if (!lease_.empty()) {
    asio::post(io_, [done] { done({}); });
    return;
  }
  waiting_.push_back(std::move(done));
  deadline_ = std::max(deadline_, deadline);
  if (granting_) return;
  granting_ = true;
  last_error_.clear();
  grant();
}

void etcd_session::grant() {
  if (!connection_) connection_ = etcd_connection::create(io_, options_, tls_);
  auto self = shared_from_this();
  json body{{"TTL", options_.lease_ttl.count()}};
  connection_->post("/v3/lease/grant", body.dump(),
                    std::min(options_.request_timeout, options_.attempt_timeout),
                    [self](etcd_reply r) {
                      if (self->closed_) return self->granted("the etcd session was closed");
                      std::string id;
                      if (r.error.empty()) id = integer_text(r.body.value("ID", json()));
                      if (!id.empty() && id != "0") {
                        self->lease_ = id;
                        return self->granted({});
                      }
                      self->last_error_ = r.error.empty() ? "etcd granted no lease" : r.error;
                      if (std::chrono::steady_clock::now() >= self->deadline_ || !r.retryable) {
                        return self->granted(fmt::format(
                            "cannot get a lease from etcd ({}): {}; the etcd cluster has no "
                            "quorum or cannot be reached: check it with `etcdctl "
                            "--endpoints=... endpoint health`",
                            members_text(self->options_.members), self->last_error_));
                      }
                      // No leader yet, or this member is gone: try the next
                      // one after a pause (an election takes about a second).
                      self->connection_->next_member();
                      self->timer_.expires_after(200ms);
                      self->timer_.async_wait(
                          [self, armed = ++self->timer_armed_](const boost::system::error_code& ec) {
                            if (ec || armed != self->timer_armed_ || self->closed_) return;
                            self->grant();
                          });
                    });
}

void etcd_session::granted(std::string error) {
  granting_ = false;
  auto waiting = std::exchange(waiting_, {});
  if (error.empty()) {
    last_renewed_ = std::chrono::steady_clock::now();
    schedule_renewal();
  }
  for (auto& w : waiting) w(error);
}

void etcd_session::schedule_renewal() {
  timer_.expires_after(std::max<std::chrono::milliseconds>(options_.lease_ttl / 3, 100ms));
  timer_.async_wait([self = shared_from_this(), armed = ++timer_armed_, lease = lease_](
                        const boost::system::error_code& ec) {
    if (ec || armed != self->timer_armed_ || self->closed_ || self->lease_ != lease) return;
    self->renew();
  });
}

void etcd_session::renew() {
  auto self = shared_from_this();
  auto lease = lease_;
  json body{{"ID", lease_}};
  // One try per member: a member without a leader holds the request.
  auto timeout = std::min<std::chrono::milliseconds>(options_.attempt_timeout, options_.lease_ttl);
  connection_->post("/v3/lease/keepalive", body.dump(), timeout, [self, lease](etcd_reply r) {
    if (self->closed_ || self->lease_ != lease) return;
    auto now = std::chrono::steady_clock::now();
    if (r.error.empty()) {
      // A lost lease still answers 200, without a TTL.
      const json& result = r.body.contains("result") ? r.body["result"] : r.body;
      auto ttl = integer_text(result.value("TTL", json()));
      if (ttl.empty() || ttl == "0") {
        return self->lose(fmt::format(
            "etcd let this agent's lease expire (its TTL is {} s; was the etcd cluster without "
            "quorum, or this machine suspended?)",
            self->options_.lease_ttl.count()));
      }
      self->last_renewed_ = now;
      return self->schedule_renewal();
    }
    self->last_error_ = r.error;
    // Twice the TTL: a new etcd leader extends every lease it inherits, so
    // an election (about 2 s) never costs a lease, however short the TTL;
    // only a cluster that stays without quorum does.
    if (now - self->last_renewed_ >= 2 * self->options_.lease_ttl) {
      return self->lose(fmt::format(
          "no etcd member renewed this agent's lease for {} s (the etcd cluster at {} lost its "
          "quorum or cannot be reached): {}",
          2 * self->options_.lease_ttl.count(), members_text(self->options_.members), r.error));
    }
    self->connection_->next_member();
    self->schedule_renewal();
  });
}

void etcd_session::lose(const std::string& why) {
  lease_.clear();
  ++timer_armed_;
  timer_.cancel();
  auto listeners = std::exchange(listeners_, {});
  for (auto& [id, lost] : listeners) lost(why);
}

std::uint64_t etcd_session::listen(std::function<void(const std::string&)> lost) {
  listeners_.emplace(++next_listener_, std::move(lost));
  return next_listener_;
}

void etcd_session::forget(std::uint64_t id) { listeners_.erase(id); }

void etcd_session::close() {
  if (closed_) return;
  closed_ = true;
  ++timer_armed_;
  timer_.cancel();
  listeners_.clear();
  if (lease_.empty() || !connection_) return;
  // Revoking removes the lease's keys now rather than a TTL later; if the
  // loop stops first, the lease simply expires.
  json body{{"ID", lease_}};
  connection_->post("/v3/lease/revoke", body.dump(), options_.request_timeout,
                    [](etcd_reply) {});
  lease_.clear();
}

}  // namespace dtrun::rendezvous
