#include "rendezvous/etcd/etcd_round_store.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <stdexcept>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_watch.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// etcd's default --max-txn-ops is 128; ranges go in batches below it.
constexpr std::size_t txn_batch = 64;

// The first key after every key that starts with `prefix`.
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

std::exception_ptr connection_error(const std::string& message) {
  return std::make_exception_ptr(store_connection_error(message));
}

// The value of a range's first key, if it has one.
std::optional<std::string> first_value(const etcd_range& range) {
  if (range.kvs.empty()) return std::nullopt;
  return range.kvs[0].value;
}

class etcd_round_store final : public round_store,
                               public std::enable_shared_from_this<etcd_round_store> {
 public:
  using finish = std::function<void(store_result)>;

  etcd_round_store(asio::io_context& io, std::shared_ptr<etcd_session> session,
                   std::chrono::milliseconds connect_timeout, std::uint64_t number)
      : io_(io), session_(std::move(session)), options_(session_->options()),
        connection_(etcd_connection::create(io, options_, session_->tls())), retry_(io),
        connect_timeout_(connect_timeout), number_(number) {}

  ~etcd_round_store() override { shut(connection_error("the etcd client was closed")); }

  // --- the queue: one operation at a time, in call order ----------------

  void enqueue(std::function<void(finish)> start, store_callback done) {
    queue_.push_back({std::move(start), std::move(done)});
    run_next();
  }

  void run_next() {
    if (busy_ || queue_.empty() || !connected_) return;
    if (!lost_.empty()) {
      return fail_queued(connection_error(lost_));
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

  void fail_queued(std::exception_ptr error) {
    auto waiting = std::exchange(queue_, {});
    for (auto& q : waiting) {
      asio::post(io_, [done = std::move(q.done), error] {
        store_result r;
        r.error = error;
        done(std::move(r));
      });
    }
  }

  void shut(std::exception_ptr error) {
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
      r.error = error;
      c(std::move(r));
    }
    fail_queued(error);
  }

  // --- etcd calls -------------------------------------------------------

  // POSTs, retrying on another member while the reply says it is worth it
  // and `may_repeat` allows it (a request that may have been applied is
  // repeated only when applying it twice is harmless).
  void call(std::string path, json body, bool may_repeat, clock_type::time_point deadline,
            std::function<void(etcd_reply)> then) {
    auto text = body.dump();
    attempt(std::move(path), std::move(text), may_repeat, deadline, std::move(then));
  }

  void attempt(std::string path, std::string text, bool may_repeat, clock_type::time_point deadline,
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
                          // session tells every client, this one included.
                          self->session_->lost(fmt::format(
                              "etcd dropped a lease of this agent ({}); its keys are gone",
                              r.error));
                          r.retryable = false;
                          return then(std::move(r));
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

  clock_type::time_point request_deadline() const {
    return clock_type::now() + options_.request_timeout;
  }

  std::string full(const std::string& key) const { return options_.key_prefix + key; }

  // --- connect ----------------------------------------------------------

  void connect(store_callback done) override {
    auto self = shared_from_this();
    auto deadline = clock_type::now() + connect_timeout_;
    session_->acquire(deadline, [self, deadline, done](std::string error) {
      if (!error.empty()) {
        store_result r;
        r.error = connection_error(error);
        done(std::move(r));
        return self->shut(connection_error(error));
      }
      if (self->closed_) {
        store_result r;
        r.error = connection_error(self->lost_);
        return done(std::move(r));
      }
      self->lease_ = self->session_->lease();
      self->job_lease_ = self->session_->job_lease();
      std::weak_ptr<etcd_round_store> weak = self;
      self->listener_ = self->session_->listen([weak](const std::string& why) {
        auto s = weak.lock();
        if (!s) return;
        s->listener_ = 0;
        s->lost_ = why;
        s->shut(connection_error(why));
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
          out.error = connection_error(why);
          done(std::move(out));
          return self->shut(connection_error(why));
        } else {
          self->connected_ = true;
          asio::post(self->io_, [self] { self->run_next(); });
        }
        done(std::move(out));
      });
    });
  }

  // --- operations -------------------------------------------------------

  void set(std::string key, std::string value, store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, key = full(key), value = std::move(value)](finish f) {
      self->put(key, value, false, f);
    }, std::move(done));
  }

  void multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                 store_callback done) override {
    if (keys.size() != values.size()) {
      throw std::invalid_argument("multi_set: the number of keys and values differ");
    }
    auto self = shared_from_this();
    for (auto& k : keys) k = full(k);
    enqueue([self, keys = std::move(keys), values = std::move(values)](finish f) {
      self->put_batches(std::move(keys), std::move(values), 0, f);
    }, std::move(done));
  }

  // Puts keys[from..] in txns of txn_batch puts (etcd caps a txn's ops).
  void put_batches(std::vector<std::string> keys, std::vector<std::string> values,
                   std::size_t from, finish f) {
    if (from >= keys.size()) return f({});
    auto end = std::min(keys.size(), from + txn_batch);
    json success = json::array();
    for (auto i = from; i < end; ++i) {
      success.push_back(json{{"request_put", json{{"key", base64_encode(keys[i])},
                                                   {"value", base64_encode(values[i])},
                                                   {"lease", job_lease_}}}});
    }
    json body{{"compare", json::array()}, {"success", success}};
    auto self = shared_from_this();
    call("/v3/kv/txn", body, true, request_deadline(),
         [self, keys = std::move(keys), values = std::move(values), end, f](etcd_reply r) mutable {
           etcd_txn txn;
           auto error = etcd_reply_problem(r, "txn",
               [&](auto text) { return parse_txn(text, txn); });
           if (!error.empty()) {
             store_result out;
             out.error = connection_error(error);
             return f(std::move(out));
           }
           self->put_batches(std::move(keys), std::move(values), end, f);
         });
  }

  // On the agent's lease (`agent_lease`: gone when this agent dies) or
  // on the job's (etcd_session.h).
  void put(const std::string& key, const std::string& value, bool agent_lease, finish f) {
    json body{{"key", base64_encode(key)},
              {"value", base64_encode(value)},
              {"lease", agent_lease ? lease_ : job_lease_}};
    call("/v3/kv/put", body, true, request_deadline(), [f](etcd_reply r) {
      store_result out;
      auto error = etcd_reply_problem(r, "put", parse_object);
      if (!error.empty()) out.error = connection_error(error);
      f(std::move(out));
    });
  }

  void get(std::string key, store_duration timeout, store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, key = full(key), timeout](finish f) {
      self->await({key}, timeout, [self, key, f](store_result w) {
        if (w.error) return f(std::move(w));
        self->read({key}, [f](store_result r) {
          if (!r.error) r.value = std::move(r.values.at(0));
          r.values.clear();
          f(std::move(r));
        });
      });
    }, std::move(done));
  }

  void wait(std::vector<std::string> keys, store_duration timeout, store_callback done) override {
    auto self = shared_from_this();
    for (auto& k : keys) k = full(k);
    enqueue([self, keys = std::move(keys), timeout](finish f) { self->await(keys, timeout, f); },
            std::move(done));
  }

  void check(std::vector<std::string> keys, store_callback done) override {
    auto self = shared_from_this();
    for (auto& k : keys) k = full(k);
    enqueue([self, keys = std::move(keys)](finish f) {
      self->missing(keys, 0, {}, 0, [f](store_result r, std::vector<std::string> absent, std::int64_t) {
        if (!r.error) r.flag = absent.empty();
        f(std::move(r));
      });
    }, std::move(done));
  }

  void multi_get(std::vector<std::string> keys, store_duration timeout, store_callback done) override {
    auto self = shared_from_this();
    for (auto& k : keys) k = full(k);
    enqueue([self, keys = std::move(keys), timeout](finish f) {
      self->await(keys, timeout, [self, keys, f](store_result w) {
        if (w.error) return f(std::move(w));
        self->read(keys, f);
      });
    }, std::move(done));
  }

  void read_now(std::vector<std::string> keys, store_callback done) override {
    auto self = shared_from_this();
    for (auto& k : keys) k = full(k);
    enqueue([self, keys = std::move(keys)](finish f) {
      self->read(keys, f, 0, {}, absent_reads_empty);
    }, std::move(done));
  }

  void delete_key(std::string key, store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, key = full(key)](finish f) {
      json body{{"key", base64_encode(key)}};
      self->call("/v3/kv/deleterange", body, true, self->request_deadline(), [f](etcd_reply r) {
        store_result out;
        std::int64_t deleted = 0;
        auto error = etcd_reply_problem(r, "deleterange",
            [&](auto text) { return parse_delete(text, deleted); });
        if (!error.empty()) {
          out.error = connection_error(error);
        } else {
          out.flag = deleted > 0;
        }
        f(std::move(out));
      });
    }, std::move(done));
  }

  void compare_set(std::string key, std::string expected, std::string desired,
                   store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, key = full(key), expected = std::move(expected),
             desired = std::move(desired)](finish f) {
      json compare{{"key", base64_encode(key)}, {"result", "EQUAL"}};
      if (expected.empty()) {
        compare["target"] = "CREATE";
        compare["create_revision"] = "0";
      } else {
        compare["target"] = "VALUE";
        compare["value"] = base64_encode(expected);
      }
      json body{{"compare", json::array({compare})},
                {"success", json::array({json{{"request_put",
                                               {{"key", base64_encode(key)},
                                                {"value", base64_encode(desired)},
                                                {"lease", self->job_lease_}}}}})},
                {"failure", json::array({range_request(key, false)})}};
      // Repeating it is harmless: a second try finds our own value and
      // reports it, as a success would.
      self->call("/v3/kv/txn", body, true, self->request_deadline(),
                 [f, expected, desired](etcd_reply r) {
                   store_result out;
                   etcd_txn txn;
                   auto error = etcd_reply_problem(r, "txn",
                       [&](auto text) { return parse_txn(text, txn); });
                   if (!error.empty()) {
                     out.error = connection_error(error);
                     return f(std::move(out));
                   }
                   if (txn.succeeded) {
                     out.value = desired;
                     return f(std::move(out));
                   }
                   std::optional<std::string> current;
                   if (!txn.responses.empty() && txn.responses[0].range) {
                     current = first_value(*txn.responses[0].range);
                   }
                   out.value = current ? *current : expected;
                   f(std::move(out));
                 });
    }, std::move(done));
  }

  void add(std::string key, std::int64_t delta, store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, key = full(key), delta](finish f) {
      if (delta == 0) return self->count_of(key, 0, f);
      if (delta != 1) {
        store_result out;
        out.error = store_error_ptr(fmt::format(
            "etcd counters count one at a time (ADD 0 or 1), not ADD {} on '{}'", delta, key));
        return f(std::move(out));
      }
      auto stamp = fmt::format("{} {}", self->lease_, ++self->add_seq_);
      self->increment(key, stamp, clock_type::now() + self->options_.request_timeout, f);
    }, std::move(done));
  }

  // A counter is the key's etcd version: the number of puts since it was
  // created. A put needs no compare-and-swap, so N nodes counting at once
  // cost N requests, not N^2 retries. `revision` 0: the current one.
  void count_of(const std::string& key, std::int64_t revision, finish f) {
    json body{{"key", base64_encode(key)}};
    if (revision > 0) body["revision"] = std::to_string(revision);
    call("/v3/kv/range", body, true, request_deadline(), [f](etcd_reply r) {
      store_result out;
      etcd_range range;
      auto error = etcd_reply_problem(r, "range",
          [&](auto text) { return parse_range(text, range); });
      if (!error.empty()) {
        out.error = connection_error(error);
        return f(std::move(out));
      }
      if (!range.kvs.empty()) out.number = range.kvs[0].version;
      f(std::move(out));
    });
  }

  // ADD 1: one txn puts the counter (returning its previous version) and
  // this client's stamp, bound to the agent's lease. When the reply is
  // lost, the stamp tells whether it applied, and the counter's version at
  // the stamp's revision is what the ADD returned: exactly once.
  void increment(const std::string& key, const std::string& stamp, clock_type::time_point deadline,
                 finish f) {
    auto marker = marker_key();
    json body{{"compare", json::array()},
              {"success", json::array({json{{"request_put",
                                             {{"key", base64_encode(key)},
                                              {"value", base64_encode(stamp)},
                                              {"lease", job_lease_},
                                              {"prev_kv", true}}}},
                                       json{{"request_put",
                                             {{"key", base64_encode(marker)},
                                              {"value", base64_encode(stamp)},
                                              {"lease", lease_}}}}})}};
    auto self = shared_from_this();
    call("/v3/kv/txn", body, false, deadline, [self, key, stamp, marker, deadline, f](etcd_reply r) {
      if (r.error.empty()) {
        etcd_txn txn;
        auto error = etcd_reply_problem(r, "txn", [&](auto text) { return parse_txn(text, txn); });
        store_result out;
        if (!error.empty()) {
          // Applied or not, a reply we cannot read is no count.
          out.error = connection_error(error);
          return f(std::move(out));
        }
        std::int64_t before = 0;
        if (!txn.responses.empty() && txn.responses[0].put_prev_kv) {
          before = txn.responses[0].put_prev_kv->version;
        }
        out.number = before + 1;
        return f(std::move(out));
      }
      if (!r.sent || !r.retryable || clock_type::now() >= deadline) {
        store_result out;
        out.error = connection_error(r.error);
        return f(std::move(out));
      }
      json probe{{"key", base64_encode(marker)}};
      self->call("/v3/kv/range", probe, true, deadline,
                 [self, key, stamp, deadline, f](etcd_reply m) {
                   etcd_range range;
                   auto error = etcd_reply_problem(m, "range",
                       [&](auto text) { return parse_range(text, range); });
                   if (!error.empty()) {
                     store_result out;
                     out.error = connection_error(error);
                     return f(std::move(out));
                   }
                   if (!range.kvs.empty() && range.kvs[0].value == stamp) {
                     // Applied: the counter's version in that same revision.
                     return self->count_of(key, range.kvs[0].mod_revision, f);
                   }
                   self->increment(key, stamp, deadline, f);
                 });
    });
  }

  // Under the job's keys, so that what a job leaves is all in one place.
  std::string marker_key() const {
    return full(fmt::format("dtrun/{}/adds/{}/{}", options_.run_id, lease_, number_));
  }

  // --- waiting ----------------------------------------------------------

  // Which of `keys` (from index `from`) do not exist; also the revision
  // the answer holds at, for a watch that must not miss what follows.
  using missing_callback =
      std::function<void(store_result, std::vector<std::string>, std::int64_t revision)>;

  void missing(std::vector<std::string> keys, std::size_t from, std::vector<std::string> absent,
               std::int64_t revision, missing_callback done) {
    if (from >= keys.size()) return done({}, std::move(absent), revision);
    auto end = std::min(keys.size(), from + txn_batch);
    json success = json::array();
    for (auto i = from; i < end; ++i) success.push_back(range_request(keys[i], true));
    json body{{"compare", json::array()}, {"success", success}};
    auto self = shared_from_this();
    call("/v3/kv/txn", body, true, request_deadline(),
         [self, keys = std::move(keys), from, end, absent = std::move(absent), revision,
          done = std::move(done)](etcd_reply r) mutable {
           etcd_txn txn;
           auto error = etcd_reply_problem(r, "txn",
               [&](auto text) { return parse_txn(text, txn); });
           if (!error.empty()) {
             store_result out;
             out.error = connection_error(error);
             return done(std::move(out), {}, 0);
           }
           for (auto i = from; i < end; ++i) {
             auto at = i - from;
             std::int64_t count = 0;
             if (at < txn.responses.size() && txn.responses[at].range) {
               count = txn.responses[at].range->count;
             }
             if (count == 0) absent.push_back(keys[i]);
           }
           if (revision == 0) revision = txn.revision;
           self->missing(std::move(keys), end, std::move(absent), revision, std::move(done));
         });
  }

  void await(std::vector<std::string> keys, store_duration timeout, finish f) {
    auto deadline = clock_type::now() + std::clamp<store_duration>(timeout, 0ms, no_timeout);
    await_until(std::move(keys), timeout, deadline, std::move(f));
  }

  void await_until(std::vector<std::string> keys, store_duration timeout,
                   clock_type::time_point deadline, finish f) {
    auto self = shared_from_this();
    missing(keys, 0, {}, 0, [self, keys, timeout, deadline, f](store_result r,
                                                               std::vector<std::string> absent,
                                                               std::int64_t revision) {
      if (r.error || absent.empty()) return f(std::move(r));
      self->watch_for(std::move(absent), revision + 1, timeout, deadline, f);
    });
  }

  // One watch over the range that holds every missing key; done when each
  // was put, or store_timeout at the deadline.
  void watch_for(std::vector<std::string> absent, std::int64_t from_revision,
                 store_duration timeout, clock_type::time_point deadline, finish f) {
    auto waiting = std::make_shared<std::set<std::string>>(absent.begin(), absent.end());
    auto low = *waiting->begin();
    auto high = *waiting->rbegin() + std::string(1, '\0');
    auto timer = std::make_shared<asio::steady_timer>(io_);
    auto watch_slot = std::make_shared<std::shared_ptr<etcd_watch>>();
    auto ended = std::make_shared<bool>(false);
    auto self = shared_from_this();
    auto end = [self, timer, watch_slot, ended, f](store_result r) {
      if (*ended) return;
      *ended = true;
      timer->cancel();
      std::erase(self->wait_timers_, timer);
      if (*watch_slot) {
        (*watch_slot)->close();
        std::erase(self->watches_, *watch_slot);
      }
      f(std::move(r));
    };
    // The revision to start from was compacted away, so a put before it
    // would never be seen: look at the keys again, as etcd's clients do
    // (read, then watch from the read's revision).
    auto compacted = [self, waiting, timer, watch_slot, ended, timeout, deadline,
                      f](std::int64_t) {
      if (*ended) return;
      *ended = true;
      timer->cancel();
      std::erase(self->wait_timers_, timer);
      if (*watch_slot) std::erase(self->watches_, *watch_slot);
      self->await_until({waiting->begin(), waiting->end()}, timeout, deadline, f);
    };
    *watch_slot = etcd_watch::start(
        io_, options_, session_->tls(),
        etcd_watch::spec{.key = low,
                         .range_end = high,
                         .start_revision = from_revision,
                         .on_compacted = compacted},
        [waiting, end](const etcd_event& e) {
          if (e.deleted) return;
          waiting->erase(e.key);
          if (waiting->empty()) end({});
        });
    watches_.push_back(*watch_slot);
    // shut() cancels it: a closed client must not live on in a timer that
    // may be set a hundred years ahead (a WAIT without a timeout).
    wait_timers_.push_back(timer);
    timer->expires_at(deadline);
    timer->async_wait([waiting, timeout, end](const boost::system::error_code& ec) {
      if (ec) return;
      std::vector<std::string> names(waiting->begin(), waiting->end());
      store_result r;
      r.error = std::make_exception_ptr(store_wait_timeout(fmt::format(
          "waited {} s for {} in etcd; it was never set", timeout.count() / 1000.0,
          fmt::join(names, ", "))));
      end(std::move(r));
    });
  }

  // What read() does with a key that is not there.
  static constexpr bool absent_reads_empty = true;

  // The values of `keys` (which exist, unless `absent_ok`), in order.
  void read(std::vector<std::string> keys, finish f, std::size_t from = 0,
            std::vector<std::string> values = {}, bool absent_ok = false) {
    if (from >= keys.size()) {
      store_result out;
      out.values = std::move(values);
      return f(std::move(out));
    }
    auto end = std::min(keys.size(), from + txn_batch);
    json success = json::array();
    for (auto i = from; i < end; ++i) success.push_back(range_request(keys[i], false));
    json body{{"compare", json::array()}, {"success", success}};
    auto self = shared_from_this();
    call("/v3/kv/txn", body, true, request_deadline(),
         [self, keys = std::move(keys), f, from, end, values = std::move(values),
          absent_ok](etcd_reply r) mutable {
           etcd_txn txn;
           auto error = etcd_reply_problem(r, "txn",
               [&](auto text) { return parse_txn(text, txn); });
           if (!error.empty()) {
             store_result out;
             out.error = connection_error(error);
             return f(std::move(out));
           }
           for (auto i = from; i < end; ++i) {
             auto at = i - from;
             std::optional<std::string> kv;
             if (at < txn.responses.size() && txn.responses[at].range) {
               kv = first_value(*txn.responses[at].range);
             }
             if (!kv && absent_ok) {
               values.emplace_back();
               continue;
             }
             if (!kv) {
               store_result out;
               out.error = store_error_ptr(fmt::format("'{}' vanished from etcd while it was read", keys[i]));
               return f(std::move(out));
             }
             values.push_back(std::move(*kv));
           }
           self->read(std::move(keys), f, end, std::move(values), absent_ok);
         });
  }

  // --- last wills -------------------------------------------------------

  void set_will(std::string will, std::string target, std::string value,
                store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, will = full(will), text = fmt::format("{}\n{}", full(target), value)](finish f) {
      self->watch_wills(will.substr(0, will.rfind('/') + 1));
      self->put(will, text, true, f);
    }, std::move(done));
  }

  void withdraw_will(std::string will, store_callback done) override {
    // Emptied, not deleted: when the lease later takes the key away, the
    // delete carries no will to execute.
    auto self = shared_from_this();
    enqueue([self, will = full(will)](finish f) { self->put(will, "", true, f); }, std::move(done));
  }

  // Every member watches the wills of its round: a will that vanishes
  // with its text (its agent's lease expired) is executed by whoever sees
  // it first; the others set the same value again, which changes nothing.
  void watch_wills(const std::string& dir) {
    if (!will_dirs_.insert(dir).second) return;
    auto self = shared_from_this();
    std::weak_ptr<etcd_round_store> weak = self;
    // From the first revision: a member that died before we looked counts.
    auto w = etcd_watch::start(
        io_, options_, session_->tls(),
        etcd_watch::spec{.key = dir, .range_end = prefix_end(dir), .start_revision = 1,
                         .prev_kv = true, .deletes_only = true},
        [weak](const etcd_event& e) {
          auto s = weak.lock();
          if (!s || !e.deleted) return;
          auto newline = e.prev_value.find('\n');
          if (newline == std::string::npos || newline == 0) return;  // withdrawn
          s->execute_will(e.prev_value.substr(0, newline), e.prev_value.substr(newline + 1));
        });
    watches_.push_back(w);
  }

  void execute_will(const std::string& target, const std::string& value) {
    // Its own connection: this client's may be busy with a long wait.
    auto c = etcd_connection::create(io_, options_, session_->tls());
    json body{{"key", base64_encode(target)},
              {"value", base64_encode(value)},
              {"lease", job_lease_}};
    c->post("/v3/kv/put", body.dump(), options_.request_timeout, [c](etcd_reply) {});
  }

  void release(std::string prefix, store_callback done) override {
    auto self = shared_from_this();
    enqueue([self, prefix = full(prefix)](finish f) {
      json body{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
      self->call("/v3/kv/deleterange", body, true, self->request_deadline(), [f](etcd_reply r) {
        store_result out;
        std::int64_t deleted = 0;
        auto error = etcd_reply_problem(r, "deleterange",
            [&](auto b) { return parse_delete(b, deleted); });
        if (!error.empty()) out.error = connection_error(error);
        f(std::move(out));
      });
    }, std::move(done));
  }

  // One txn: the prefixes go only if `counter` still counts `count` and
  // `unset` was never created, so nobody can have joined in between.
  void release_unstarted(std::vector<std::string> prefixes, std::string counter,
                         std::int64_t count, std::string unset, store_callback done) override {
    auto self = shared_from_this();
    for (auto& p : prefixes) p = full(p);
    enqueue([self, prefixes = std::move(prefixes), counter = full(counter), count,
             unset = full(unset)](finish f) {
      json compare = json::array(
          {json{{"key", base64_encode(counter)},
                {"target", "VERSION"},
                {"result", "EQUAL"},
                {"version", std::to_string(count)}},
           json{{"key", base64_encode(unset)},
                {"target", "CREATE"},
                {"result", "EQUAL"},
                {"create_revision", "0"}}});
      json deletes = json::array();
      for (const auto& p : prefixes) {
        deletes.push_back(json{{"request_delete_range",
                                {{"key", base64_encode(p)},
                                 {"range_end", base64_encode(prefix_end(p))}}}});
      }
      json body{{"compare", compare}, {"success", deletes}};
      self->call("/v3/kv/txn", body, true, self->request_deadline(), [f](etcd_reply r) {
        store_result out;
        etcd_txn txn;
        auto error = etcd_reply_problem(r, "txn", [&](auto b) { return parse_txn(b, txn); });
        if (!error.empty()) out.error = connection_error(error);
        out.flag = txn.succeeded;
        f(std::move(out));
      });
    }, std::move(done));
  }

  // --- the rest ---------------------------------------------------------

  void close() override { shut(connection_error("the etcd client was closed")); }

  std::string local_address() const override { return connection_->local_address(); }

 private:
  struct queued {
    std::function<void(finish)> start;
    store_callback done;
  };

  asio::io_context& io_;
  std::shared_ptr<etcd_session> session_;
  etcd_options options_;
  std::shared_ptr<etcd_connection> connection_;
  asio::steady_timer retry_;
  std::chrono::milliseconds connect_timeout_;
  std::uint64_t number_;
  std::string lease_, job_lease_;
  std::deque<queued> queue_;
  finish cancel_current_;
  std::vector<std::shared_ptr<etcd_watch>> watches_;
  std::vector<std::shared_ptr<asio::steady_timer>> wait_timers_;
  std::set<std::string> will_dirs_;
  std::string lost_;
  std::uint64_t listener_ = 0;
  std::uint64_t add_seq_ = 0;
  std::uint64_t op_generation_ = 0;
  bool connected_ = false, busy_ = false, closed_ = false;
};

}  // namespace

round_store_factory etcd_round_store_factory(asio::io_context& io,
                                             std::shared_ptr<etcd_session> session) {
  auto count = std::make_shared<std::uint64_t>(0);
  return [&io, session, count](std::chrono::milliseconds connect_timeout) {
    return std::make_shared<etcd_round_store>(io, session, connect_timeout, ++*count);
  };
}

}  // namespace dtrun::rendezvous
