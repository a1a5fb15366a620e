// The etcd client's waits and batched reads (etcd_round_store_client.h):
// which keys are missing, a watch until they are put, their values.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rendezvous/etcd/etcd_round_store_client.h"

namespace dtrun::rendezvous::etcd_client {

namespace asio = boost::asio;
using namespace std::chrono_literals;

void etcd_round_store::missing(std::vector<std::string> keys, std::size_t from,
                               std::vector<std::string> absent, std::int64_t revision,
                               missing_callback done) {
  if (from >= keys.size()) return done({}, std::move(absent), revision);
  auto end = std::min(keys.size(), from + txn_batch);
  auto body = range_txn(keys, from, end, true);
  auto self = shared_from_this();
  call("/v3/kv/txn", body, true, request_deadline(),
       [self, keys = std::move(keys), from, end, absent = std::move(absent), revision,
        done = std::move(done)](etcd_reply r) mutable {
         etcd_txn txn;
         auto error = txn_problem(r, txn);
         if (!error.empty()) return done(connection_failure(error), {}, 0);
         for (auto i = from; i < end; ++i) {
           std::int64_t count = 0;
           if (auto range = response_range(txn, i - from)) count = range->count;
           if (count == 0) absent.push_back(keys[i]);
         }
         if (revision == 0) revision = txn.revision;
         self->missing(std::move(keys), end, std::move(absent), revision, std::move(done));
       });
}

void etcd_round_store::await(std::vector<std::string> keys, store_duration timeout, finish f) {
  auto deadline = clock_type::now() + std::clamp<store_duration>(timeout, 0ms, no_timeout);
  await_until(std::move(keys), timeout, deadline, std::move(f));
}

void etcd_round_store::await_until(std::vector<std::string> keys, store_duration timeout,
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
void etcd_round_store::watch_for(std::vector<std::string> absent, std::int64_t from_revision,
                                 store_duration timeout, clock_type::time_point deadline,
                                 finish f) {
  auto waiting = std::make_shared<std::set<std::string>>(absent.begin(), absent.end());
  auto low = *waiting->begin();
  auto high = *waiting->rbegin() + std::string(1, '\0');
  auto timer = std::make_shared<asio::steady_timer>(io_);
  auto watch_slot = std::make_shared<std::shared_ptr<etcd_watch>>();
  auto ended = std::make_shared<bool>(false);
  auto self = shared_from_this();
  // Ends the wait, once: false when it had ended already.
  auto stop = [self, timer, ended] {
    if (*ended) return false;
    *ended = true;
    timer->cancel();
    std::erase(self->wait_timers_, timer);
    return true;
  };
  auto end = [self, watch_slot, stop, f](store_result r) {
    if (!stop()) return;
    if (*watch_slot) {
      (*watch_slot)->close();
      std::erase(self->watches_, *watch_slot);
    }
    f(std::move(r));
  };
  // The revision to start from was compacted away, so a put before it
  // would never be seen: look at the keys again, as etcd's clients do
  // (read, then watch from the read's revision).
  auto compacted = [self, waiting, watch_slot, stop, timeout, deadline, f](std::int64_t) {
    if (!stop()) return;
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
    r.fail(std::make_exception_ptr(store_wait_timeout(fmt::format(
        "waited {} s for {} in etcd; it was never set", timeout.count() / 1000.0,
        fmt::join(names, ", ")))));
    end(std::move(r));
  });
}

void etcd_round_store::read(std::vector<std::string> keys, finish f, std::size_t from,
                            std::vector<std::string> values, bool absent_ok) {
  if (from >= keys.size()) {
    store_result out;
    out.values = std::move(values);
    return f(std::move(out));
  }
  auto end = std::min(keys.size(), from + txn_batch);
  auto body = range_txn(keys, from, end, false);
  auto self = shared_from_this();
  call("/v3/kv/txn", body, true, request_deadline(),
       [self, keys = std::move(keys), f, from, end, values = std::move(values),
        absent_ok](etcd_reply r) mutable {
         etcd_txn txn;
         auto error = txn_problem(r, txn);
         if (!error.empty()) return f(connection_failure(error));
         for (auto i = from; i < end; ++i) {
           auto range = response_range(txn, i - from);
           if ((!range || range->kvs.empty()) && absent_ok) {
             values.emplace_back();
             continue;
           }
           if (!range || range->kvs.empty()) {
             store_result out;
             out.fail(store_error_ptr(fmt::format("'{}' vanished from etcd while it was read", keys[i])));
             return f(std::move(out));
           }
           values.push_back(range->kvs[0].value);
         }
         self->read(std::move(keys), f, end, std::move(values), absent_ok);
       });
}

}  // namespace dtrun::rendezvous::etcd_client
