#include "rendezvous/etcd/etcd_round_store.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_round_store_client.h"

namespace dtrun::rendezvous {

namespace etcd_client {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = prefix.back();
    if (static_cast<unsigned char>(last) != 0xff) {
      last = static_cast<char>(static_cast<unsigned char>(last) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

json range_request(const std::string& key, bool count_only) {
  json r{{"key", base64_encode(key)}};
  if (count_only) r["count_only"] = true;
  return json{{"request_range", r}};
}

json range_txn(const std::vector<std::string>& keys, std::size_t from, std::size_t end,
               bool count_only) {
  json success = json::array();
  for (auto i = from; i < end; ++i) success.push_back(range_request(keys[i], count_only));
  return json{{"compare", json::array()}, {"success", success}};
}

std::exception_ptr connection_error(const std::string& message) {
  return std::make_exception_ptr(store_connection_error(message));
}

std::exception_ptr session_lost_error(const std::string& message) {
  return std::make_exception_ptr(store_session_lost(message));
}

std::exception_ptr closed_here() {
  return std::make_exception_ptr(store_closed_error("the etcd client was closed"));
}

store_result connection_failure(const std::string& message) {
  return store_result::failed(connection_error(message));
}

std::string txn_problem(const etcd_reply& r, etcd_txn& txn) {
  return etcd_reply_problem(r, "txn", [&](auto text) { return parse_txn(text, txn); });
}

const etcd_range* response_range(const etcd_txn& txn, std::size_t at) {
  if (at < txn.responses.size() && txn.responses[at].range) return &*txn.responses[at].range;
  return nullptr;
}

etcd_round_store::etcd_round_store(asio::io_context& io, std::shared_ptr<etcd_session> session,
                                   std::chrono::milliseconds connect_timeout,
                                   std::uint64_t number)
    : io_(io), session_(std::move(session)), options_(session_->options()),
      connection_(etcd_connection::create(io, options_, session_->tls())), retry_(io),
      connect_timeout_(connect_timeout), number_(number) {}

etcd_round_store::~etcd_round_store() { shut(closed_here()); }

// --- the queue: one operation at a time, in call order ----------------

void etcd_round_store::enqueue(std::function<void(finish)> start, store_callback done) {
  queue_.push_back({std::move(start), std::move(done)});
  run_next();
}

void etcd_round_store::run_next() {
  if (busy_ || queue_.empty() || !connected_) return;
  if (!lost_.empty()) {
    return fail_queued(session_lost_ ? session_lost_error(lost_) : connection_error(lost_));
  }
  busy_ = true;
  auto op = std::move(queue_.front());
  queue_.pop_front();
  auto self = shared_from_this();
  auto once = std::make_shared<bool>(false);
  auto generation = ++op_generation_;
  auto done = std::make_shared<store_callback>(std::move(op.done));
  finish complete = [self, once, done, generation](store_result r) {
    if (*once) return;
    *once = true;
    // Once the agent's lease is lost, that is why whatever failed failed
    // (a put refused on it, a call cut short by the shut): the rendezvous
    // then takes a new lease instead of giving up.
    if (r.error && self->session_lost_) r = store_result::failed(session_lost_error(self->lost_));
    // Always from the loop, never inside the call that finished it.
    asio::post(self->io_, [self, done, generation, r = std::move(r)]() mutable {
      if (generation == self->op_generation_) {
        self->busy_ = false;
        self->cancel_current_ = nullptr;
      }
      (*done)(std::move(r));
      self->run_next();
    });
  };
  cancel_current_ = complete;
  op.start(complete);
}

void etcd_round_store::fail_queued(std::exception_ptr error) {
  auto waiting = std::exchange(queue_, {});
  for (auto& q : waiting) {
    asio::post(io_, [done = std::move(q.done), error] {
      store_result r;
      r.fail(error);
      done(std::move(r));
    });
  }
}

void etcd_round_store::shut(std::exception_ptr error) {
  if (closed_) return;
  closed_ = true;
  if (lost_.empty()) lost_ = "the etcd client was closed";
  if (listener_) session_->forget(listener_);
  retry_.cancel();
  for (auto& w : watches_) w->close();
  watches_.clear();
  for (auto& t : std::exchange(wait_timers_, {})) t->cancel();
  connection_->close();
  if (auto c = std::exchange(cancel_current_, nullptr)) {
    store_result r;
    r.fail(error);
    c(std::move(r));
  }
  fail_queued(error);
}

// --- etcd calls -------------------------------------------------------

void etcd_round_store::call(std::string path, json body, bool may_repeat,
                            clock_type::time_point deadline,
                            std::function<void(etcd_reply)> then) {
  auto text = body.dump();
  attempt(std::move(path), std::move(text), may_repeat, deadline, std::move(then));
}

void etcd_round_store::attempt(std::string path, std::string text, bool may_repeat,
                               clock_type::time_point deadline,
                               std::function<void(etcd_reply)> then) {
  auto self = shared_from_this();
  auto timeout = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()), 1ms);
  connection_->post(path, text, std::min({timeout, options_.request_timeout,
                                          options_.attempt_timeout}),
                    [self, path, text, may_repeat, deadline, then](etcd_reply r) mutable {
                      if (self->closed_) {
                        r.error = self->lost_;
                        r.retryable = false;
                        return then(std::move(r));
                      }
                      if (r.error.find("requested lease not found") != std::string::npos) {
                        // The job's lease (or ours) expired under us: the
                        // session finds out which and tells every client,
                        // this one included, before the call fails (as a
                        // lost session, then).
                        r.retryable = false;
                        return self->session_->lease_refused(
                            r.error, [r, then]() mutable { then(std::move(r)); });
                      }
                      if (r.error.empty() || !r.retryable || (r.sent && !may_repeat) ||
                          clock_type::now() >= deadline) {
                        return then(std::move(r));
                      }
                      self->connection_->next_member();
                      self->retry_.expires_after(100ms);
                      self->retry_.async_wait([self, path = std::move(path),
                                               text = std::move(text), may_repeat, deadline,
                                               then = std::move(then)](
                                                  const boost::system::error_code& ec) mutable {
                        if (ec || self->closed_) {
                          etcd_reply closed;
                          closed.error = self->lost_;
                          return then(std::move(closed));
                        }
                        self->attempt(std::move(path), std::move(text), may_repeat, deadline,
                                      std::move(then));
                      });
                    });
}

clock_type::time_point etcd_round_store::request_deadline() const {
  return clock_type::now() + options_.request_timeout;
}

std::string etcd_round_store::full(const std::string& key) const {
  return options_.key_prefix + key;
}

std::vector<std::string> etcd_round_store::full(std::vector<std::string> keys) const {
  for (auto& k : keys) k = full(k);
  return keys;
}

// --- connect ----------------------------------------------------------

void etcd_round_store::connect(store_callback done) {
  auto self = shared_from_this();
  auto deadline = clock_type::now() + connect_timeout_;
  session_->acquire(deadline, [self, deadline, done](std::string error) {
    if (!error.empty()) {
      done(connection_failure(error));
      return self->shut(connection_error(error));
    }
    if (self->closed_) {
      return done(connection_failure(self->lost_));
    }
    self->lease_ = self->session_->lease();
    self->job_lease_ = self->session_->job_lease();
    std::weak_ptr<etcd_round_store> weak = self;
    self->listener_ = self->session_->listen([weak](const std::string& why) {
      auto s = weak.lock();
      if (!s) return;
      s->listener_ = 0;
      s->lost_ = why;
      s->session_lost_ = true;
      s->shut(session_lost_error(why));
    });
    // A first request on our own connection: it proves a member answers
    // and gives local_address() the address the cluster sees.
    json probe{{"key", base64_encode(self->full("dtrun/"))}, {"count_only", true}};
    self->call("/v3/kv/range", probe, true, deadline, [self, done](etcd_reply r) {
      store_result out;
      etcd_range range;
      auto why = etcd_reply_problem(r, "range",
          [&](auto text) { return parse_range(text, range); });
      if (!why.empty()) {
        done(connection_failure(why));
        return self->shut(connection_error(why));
      } else {
        self->connected_ = true;
        asio::post(self->io_, [self] { self->run_next(); });
      }
      done(std::move(out));
    });
  });
}

// --- the rest ---------------------------------------------------------

void etcd_round_store::close() { shut(closed_here()); }

std::string etcd_round_store::local_address() const { return connection_->local_address(); }

}  // namespace etcd_client

round_store_factory etcd_round_store_factory(boost::asio::io_context& io,
                                             std::shared_ptr<etcd_session> session) {
  auto count = std::make_shared<std::uint64_t>(0);
  return [&io, session, count](std::chrono::milliseconds connect_timeout) {
    return std::make_shared<etcd_client::etcd_round_store>(io, session, connect_timeout,
                                                           ++*count);
  };
}

}  // namespace dtrun::rendezvous
