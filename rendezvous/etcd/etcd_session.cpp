#include "rendezvous/etcd/etcd_session.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/base/generation_timer.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// A lease ID read back from etcd (the job's lease key): a positive 64-bit
// decimal, or "" when it is not one.
std::string lease_id_of(const std::string& text) {
  auto id = parse_whole<std::int64_t>(text);
  if (!id || *id <= 0) return {};
  return std::to_string(*id);
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
  if (!job_lease_.empty()) {
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

std::string etcd_session::job_lease_key() const {
  return fmt::format("{}dtrun/{}/lease", options_.key_prefix, options_.run_id);
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
                      r.error = etcd_reply_problem(r, "lease grant",
                          [&](std::string_view text) { return parse_lease_grant(text, id); });
                      if (r.error.empty()) {
                        self->lease_ = id;
                        return self->join_job();
                      }
                      // A member that answers nonsense may be alone in it:
                      // the next one is worth a try.
                      self->last_error_ = r.error;
                      if (!r.retryable && r.status != 200) return self->give_up();
                      self->retry_later([self] { self->grant(); });
                    });
}

// The job's lease: adopt the one its key names, or grant one and record
// it, unless another agent recorded its own first (then adopt that one).
void etcd_session::join_job() {
  auto self = shared_from_this();
  json body{{"key", base64_encode(job_lease_key())}};
  connection_->post("/v3/kv/range", body.dump(),
                    std::min(options_.request_timeout, options_.attempt_timeout),
                    [self](etcd_reply r) {
                      if (self->closed_) return self->granted("the etcd session was closed");
                      etcd_range range;
                      r.error = etcd_reply_problem(r, "range",
                          [&](std::string_view text) { return parse_range(text, range); });
                      if (!r.error.empty()) {
                        self->last_error_ = r.error;
                        return self->retry_later([self] { self->join_job(); });
                      }
                      if (!range.kvs.empty()) {
                        auto id = lease_id_of(range.kvs[0].value);
                        if (!id.empty()) {
                          self->job_lease_ = id;
                          return self->granted({});
                        }
                      }
                      self->adopt_or_create({});
                    });
}

void etcd_session::adopt_or_create(std::string candidate) {
  auto self = shared_from_this();
  auto timeout = std::min(options_.request_timeout, options_.attempt_timeout);
  if (candidate.empty()) {
    json body{{"TTL", options_.lease_ttl.count()}};
    connection_->post("/v3/lease/grant", body.dump(), timeout, [self](etcd_reply r) {
      if (self->closed_) return self->granted("the etcd session was closed");
      std::string id;
      r.error = etcd_reply_problem(r, "lease grant",
          [&](std::string_view text) { return parse_lease_grant(text, id); });
      if (!r.error.empty()) {
        self->last_error_ = r.error;
        return self->retry_later([self] { self->join_job(); });
      }
      self->adopt_or_create(id);
    });
    return;
  }
  auto key = base64_encode(job_lease_key());
  json body{{"compare", json::array({json{{"key", key},
                                          {"target", "CREATE"},
                                          {"result", "EQUAL"},
                                          {"create_revision", "0"}}})},
            {"success", json::array({json{{"request_put",
                                           {{"key", key},
                                            {"value", base64_encode(candidate)},
                                            {"lease", candidate}}}}})},
            {"failure", json::array({json{{"request_range", {{"key", key}}}}})}};
  connection_->post("/v3/kv/txn", body.dump(), timeout, [self, candidate](etcd_reply r) {
    if (self->closed_) return self->granted("the etcd session was closed");
    etcd_txn txn;
    r.error = etcd_reply_problem(r, "txn",
        [&](std::string_view text) { return parse_txn(text, txn); });
    if (!r.error.empty()) {
      // Perhaps applied: the next try reads the key first.
      self->last_error_ = r.error;
      return self->retry_later([self] { self->join_job(); });
    }
    std::string id = candidate;
    if (!txn.succeeded) {
      // Another agent of the job was first: its lease is the job's.
      id.clear();
      if (!txn.responses.empty() && txn.responses[0].range && !txn.responses[0].range->kvs.empty()) {
        id = lease_id_of(txn.responses[0].range->kvs[0].value);
      }
      json revoke{{"ID", candidate}};
      self->connection_->post("/v3/lease/revoke", revoke.dump(), self->options_.request_timeout,
                              [](etcd_reply) {});
      // Gone again already (its lease just expired): start over.
      if (id.empty()) {
        self->last_error_ = fmt::format(
            "the job's lease key {} existed when it was to be created, then named no lease",
            self->job_lease_key());
        return self->retry_later([self] { self->join_job(); });
      }
    }
    self->job_lease_ = id;
    self->granted({});
  });
}

void etcd_session::give_up() {
  // A member that answers, wrongly, is no quorum problem: its line says
  // what to check.
  if (last_error_.find("sent a malformed") != std::string::npos) {
    return granted(fmt::format("cannot get a lease from etcd ({}): {}",
                               members_text(options_.members), last_error_));
  }
  granted(fmt::format(
      "cannot get a lease from etcd ({}): {}; the etcd cluster has no quorum or cannot be "
      "reached: check it with `etcdctl --endpoints=... endpoint health`",
      members_text(options_.members), last_error_));
}

// No leader yet, or this member is gone: try the next one after a pause
// (an election takes about a second), until the deadline.
void etcd_session::retry_later(std::function<void()> step) {
  if (std::chrono::steady_clock::now() >= deadline_) return give_up();
  connection_->next_member();
  timer_.arm_after(200ms, [self = shared_from_this(), step = std::move(step)] {
    if (self->closed_) return;
    step();
  });
}

void etcd_session::granted(std::string error) {
  granting_ = false;
  auto waiting = std::exchange(waiting_, {});
  if (!error.empty()) {
    lease_.clear();
    job_lease_.clear();
  } else {
    last_renewed_ = std::chrono::steady_clock::now();
    schedule_renewal();
  }
  for (auto& w : waiting) w(error);
}

void etcd_session::schedule_renewal() {
  // In milliseconds: a third of 2 s in whole seconds would be 0.
  auto third = std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 3;
  timer_.arm_after(std::max<std::chrono::milliseconds>(third, 100ms),
                   [self = shared_from_this(), lease = lease_] {
                     if (self->closed_ || self->lease_ != lease) return;
                     self->renew();
                   });
}

std::string etcd_session::agent_lease_lost() const {
  return fmt::format("etcd let this agent's lease expire (its TTL is {} s; was the etcd cluster "
                     "without quorum, or this machine suspended?)",
                     options_.lease_ttl.count());
}

std::string etcd_session::job_lease_lost() const {
  return fmt::format("the job's lease in etcd expired (no agent of run '{}' renewed it for {} s), "
                     "and the job's keys with it",
                     options_.run_id, options_.lease_ttl.count());
}

// The agent's lease first, then the job's: the job's keys stay while any of
// its agents lives.
void etcd_session::renew() {
  auto self = shared_from_this();
  auto failed = [self](const std::string& error) { self->renewal_failed(error); };
  keep_alive(lease_, agent_lease_lost(), [self, failed] {
    self->keep_alive(self->job_lease_, self->job_lease_lost(), [self] {
      self->last_renewed_ = std::chrono::steady_clock::now();
      self->schedule_renewal();
    }, failed);
  }, failed);
}

// The same two keep-alives as a renewal, at once and apart from it: the
// regular renewal goes on. When both leases live after all (the refused
// request named a lease this session no longer holds), they still count as
// lost, with etcd's words: the rendezvous rejoins on fresh ones either way.
void etcd_session::lease_refused(const std::string& error, std::function<void()> checked) {
  if (job_lease_.empty() || closed_) return asio::post(io_, std::move(checked));
  checked_.push_back(std::move(checked));
  if (checking_) return;
  checking_ = true;
  auto self = shared_from_this();
  auto unknown = [self, error](const std::string&) {
    self->lose(fmt::format("etcd dropped a lease of this agent ({}); its keys are gone", error));
  };
  keep_alive(lease_, agent_lease_lost(), [self, unknown] {
    self->keep_alive(self->job_lease_, self->job_lease_lost(), [unknown] { unknown({}); },
                     unknown);
  }, unknown);
}

// One keep-alive of lease `id`; `renewed` runs when etcd extended it,
// `failed` when no usable answer came, and the leases are lost with
// `lost_message` when etcd says it expired.
void etcd_session::keep_alive(const std::string& id, std::string lost_message,
                              std::function<void()> renewed,
                              std::function<void(const std::string&)> failed) {
  auto self = shared_from_this();
  auto lease = lease_;
  json body{{"ID", id}};
  // One try per member: a member without a leader holds the request.
  auto timeout = std::min<std::chrono::milliseconds>(options_.attempt_timeout, options_.lease_ttl);
  connection_->post("/v3/lease/keepalive", body.dump(), timeout,
                    [self, lease, lost_message = std::move(lost_message),
                     renewed = std::move(renewed), failed = std::move(failed)](etcd_reply r) {
                      if (self->closed_ || self->lease_ != lease) return;
                      std::int64_t ttl = 0;
                      r.error = etcd_reply_problem(r, "lease keep-alive",
                          [&](std::string_view text) { return parse_keepalive(text, ttl); });
                      if (!r.error.empty()) return failed(r.error);
                      // A lost lease still answers 200, without a TTL.
                      if (ttl == 0) return self->lose(lost_message);
                      renewed();
                    });
}

// A renewal that got no usable answer (a dead member, an election, a reply
// of the wrong shape) costs nothing until twice the TTL has passed: a new
// etcd leader extends every lease it inherits, so an election (about 2 s)
// never costs a lease, however short the TTL; only a cluster that stays
// without quorum does.
void etcd_session::renewal_failed(const std::string& error) {
  last_error_ = error;
  if (std::chrono::steady_clock::now() - last_renewed_ >= 2 * options_.lease_ttl) {
    return lose(fmt::format(
        "no etcd member renewed this agent's lease for {} s (the etcd cluster at {} lost its "
        "quorum or cannot be reached): {}",
        2 * options_.lease_ttl.count(), members_text(options_.members), error));
  }
  connection_->next_member();
  schedule_renewal();
}

void etcd_session::lose(const std::string& why) {
  lease_.clear();
  job_lease_.clear();
  timer_.cancel();
  auto listeners = std::exchange(listeners_, {});
  for (auto& [id, lost] : listeners) lost(why);
  end_check();
}

// Every lease_refused caller hears that the check is over: the lease is
// lost (their clients were told first) or the session closed.
void etcd_session::end_check() {
  checking_ = false;
  for (auto& checked : std::exchange(checked_, {})) asio::post(io_, std::move(checked));
}

std::uint64_t etcd_session::listen(std::function<void(const std::string&)> lost) {
  listeners_.emplace(++next_listener_, std::move(lost));
  return next_listener_;
}

void etcd_session::forget(std::uint64_t id) { listeners_.erase(id); }

void etcd_session::close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  listeners_.clear();
  end_check();
  if (lease_.empty() || !connection_) return;
  // Revoking removes the lease's keys now rather than a TTL later; if the
  // loop stops first, the lease simply expires. Only the agent's own: the
  // job's lease may still hold a live job's keys.
  json body{{"ID", lease_}};
  connection_->post("/v3/lease/revoke", body.dump(), options_.request_timeout,
                    [](etcd_reply) {});
  lease_.clear();
  job_lease_.clear();
}

}  // namespace dtrun::rendezvous
