// The etcd client's ADD (etcd_round_store_client.h): a counter is the
// key's etcd version, counted exactly once across a lost reply.
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_round_store_client.h"

namespace dtrun::rendezvous::etcd_client {

using json = nlohmann::json;

void etcd_round_store::add(std::string key, std::int64_t delta, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, key = full(key), delta](finish f) {
    if (delta == 0) return self->count_of(key, 0, f);
    if (delta != 1) {
      store_result out;
      out.fail(store_error_ptr(fmt::format(
          "etcd counters count one at a time (ADD 0 or 1), not ADD {} on '{}'", delta, key)));
      return f(std::move(out));
    }
    auto stamp = fmt::format("{} {}", self->lease_, ++self->add_seq_);
    self->increment(key, stamp, clock_type::now() + self->options_.request_timeout, f);
  }, std::move(done));
}

// A counter is the key's etcd version: the number of puts since it was
// created. A put needs no compare-and-swap, so N nodes counting at once
// cost N requests, not N^2 retries. `revision` 0: the current one.
void etcd_round_store::count_of(const std::string& key, std::int64_t revision, finish f) {
  json body{{"key", base64_encode(key)}};
  if (revision > 0) body["revision"] = std::to_string(revision);
  call("/v3/kv/range", body, true, request_deadline(), [f](etcd_reply r) {
    store_result out;
    etcd_range range;
    auto error = etcd_reply_problem(r, "range",
        [&](auto text) { return parse_range(text, range); });
    if (!error.empty()) return f(connection_failure(error));
    if (!range.kvs.empty()) out.number = range.kvs[0].version;
    f(std::move(out));
  });
}

// ADD 1: one txn puts the counter (returning its previous version) and
// this client's stamp, bound to the agent's lease. When the reply is
// lost, the stamp tells whether it applied, and the counter's version at
// the stamp's revision is what the ADD returned: exactly once.
void etcd_round_store::increment(const std::string& key, const std::string& stamp,
                                 clock_type::time_point deadline, finish f) {
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
      auto error = txn_problem(r, txn);
      store_result out;
      if (!error.empty()) {
        // Applied or not, a reply we cannot read is no count.
        return f(connection_failure(error));
      }
      std::int64_t before = 0;
      if (!txn.responses.empty() && txn.responses[0].put_prev_kv) {
        before = txn.responses[0].put_prev_kv->version;
      }
      out.number = before + 1;
      return f(std::move(out));
    }
    if (!r.sent || !r.retryable || clock_type::now() >= deadline) {
      return f(connection_failure(r.error));
    }
    self->confirm_increment(key, stamp, marker, deadline, f);
  });
}

// The reply to an increment was lost after it was sent: the marker says
// whether it applied.
void etcd_round_store::confirm_increment(const std::string& key, const std::string& stamp,
                                         const std::string& marker,
                                         clock_type::time_point deadline, finish f) {
  json probe{{"key", base64_encode(marker)}};
  auto self = shared_from_this();
  call("/v3/kv/range", probe, true, deadline, [self, key, stamp, deadline, f](etcd_reply m) {
    etcd_range range;
    auto error = etcd_reply_problem(m, "range",
        [&](auto text) { return parse_range(text, range); });
    if (!error.empty()) return f(connection_failure(error));
    if (!range.kvs.empty() && range.kvs[0].value == stamp) {
      // Applied: the counter's version in that same revision.
      return self->count_of(key, range.kvs[0].mod_revision, f);
    }
    self->increment(key, stamp, deadline, f);
  });
}

// Under the job's keys, so that what a job leaves is all in one place.
std::string etcd_round_store::marker_key() const {
  return full(fmt::format("dtrun/{}/adds/{}/{}", options_.run_id, lease_, number_));
}

}  // namespace dtrun::rendezvous::etcd_client
