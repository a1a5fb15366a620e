// The etcd client's writes, plain reads and releases (etcd_round_store_client.h).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_round_store_client.h"

namespace dtrun::rendezvous::etcd_client {

using json = nlohmann::json;

void etcd_round_store::set(std::string key, std::string value, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, key = full(key), value = std::move(value)](finish f) {
    self->put(key, value, false, f);
  }, std::move(done));
}

void etcd_round_store::multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                                 store_callback done) {
  if (keys.size() != values.size()) {
    throw std::invalid_argument("multi_set: the number of keys and values differ");
  }
  auto self = shared_from_this();
  enqueue([self, keys = full(std::move(keys)), values = std::move(values)](finish f) {
    self->put_batches(std::move(keys), std::move(values), 0, f);
  }, std::move(done));
}

// Puts keys[from..] in txns of txn_batch puts (etcd caps a txn's ops).
void etcd_round_store::put_batches(std::vector<std::string> keys,
                                   std::vector<std::string> values, std::size_t from, finish f) {
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
         auto error = txn_problem(r, txn);
         if (!error.empty()) return f(connection_failure(error));
         self->put_batches(std::move(keys), std::move(values), end, f);
       });
}

// On the agent's lease (`agent_lease`: gone when this agent dies) or
// on the job's (etcd_session.h).
void etcd_round_store::put(const std::string& key, const std::string& value, bool agent_lease,
                           finish f) {
  json body{{"key", base64_encode(key)},
            {"value", base64_encode(value)},
            {"lease", agent_lease ? lease_ : job_lease_}};
  call("/v3/kv/put", body, true, request_deadline(), [f](etcd_reply r) {
    store_result out;
    auto error = etcd_reply_problem(r, "put", parse_object);
    if (!error.empty()) out.fail(connection_error(error));
    f(std::move(out));
  });
}

void etcd_round_store::get(std::string key, store_duration timeout, store_callback done) {
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

void etcd_round_store::wait(std::vector<std::string> keys, store_duration timeout,
                            store_callback done) {
  auto self = shared_from_this();
  enqueue([self, keys = full(std::move(keys)), timeout](finish f) {
    self->await(keys, timeout, f);
  }, std::move(done));
}

void etcd_round_store::check(std::vector<std::string> keys, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, keys = full(std::move(keys))](finish f) {
    self->missing(keys, 0, {}, 0, [f](store_result r, std::vector<std::string> absent, std::int64_t) {
      if (!r.error) r.flag = absent.empty();
      f(std::move(r));
    });
  }, std::move(done));
}

void etcd_round_store::multi_get(std::vector<std::string> keys, store_duration timeout,
                                 store_callback done) {
  auto self = shared_from_this();
  enqueue([self, keys = full(std::move(keys)), timeout](finish f) {
    self->await(keys, timeout, [self, keys, f](store_result w) {
      if (w.error) return f(std::move(w));
      self->read(keys, f);
    });
  }, std::move(done));
}

void etcd_round_store::read_now(std::vector<std::string> keys, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, keys = full(std::move(keys))](finish f) {
    self->read(keys, f, 0, {}, absent_reads_empty);
  }, std::move(done));
}

// A deleterange; `then` gets the result (its error set when it failed)
// and how many keys went.
void etcd_round_store::delete_range(json body,
                                    std::function<void(store_result, std::int64_t)> then) {
  call("/v3/kv/deleterange", body, true, request_deadline(), [then](etcd_reply r) {
    store_result out;
    std::int64_t deleted = 0;
    auto error = etcd_reply_problem(r, "deleterange",
        [&](auto text) { return parse_delete(text, deleted); });
    if (!error.empty()) out.fail(connection_error(error));
    then(std::move(out), deleted);
  });
}

void etcd_round_store::delete_key(std::string key, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, key = full(key)](finish f) {
    json body{{"key", base64_encode(key)}};
    self->delete_range(body, [f](store_result out, std::int64_t deleted) {
      if (!out.error) out.flag = deleted > 0;
      f(std::move(out));
    });
  }, std::move(done));
}

void etcd_round_store::compare_set(std::string key, std::string expected, std::string desired,
                                   store_callback done) {
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
                 auto error = txn_problem(r, txn);
                 if (!error.empty()) return f(connection_failure(error));
                 if (txn.succeeded) {
                   out.value = desired;
                   return f(std::move(out));
                 }
                 std::optional<std::string> current;
                 if (auto range = response_range(txn, 0); range && !range->kvs.empty()) {
                   current = range->kvs[0].value;
                 }
                 out.value = current ? *current : expected;
                 f(std::move(out));
               });
  }, std::move(done));
}

void etcd_round_store::release(std::string prefix, store_callback done) {
  auto self = shared_from_this();
  enqueue([self, prefix = full(prefix)](finish f) {
    json body{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
    self->delete_range(body, [f](store_result out, std::int64_t) { f(std::move(out)); });
  }, std::move(done));
}

// One txn: the prefixes go only if `counter` still counts `count` and
// `unset` was never created, so nobody can have joined in between.
void etcd_round_store::release_unstarted(std::vector<std::string> prefixes, std::string counter,
                                         std::int64_t count, std::string unset,
                                         store_callback done) {
  auto self = shared_from_this();
  enqueue([self, prefixes = full(std::move(prefixes)), counter = full(counter), count,
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
      auto error = txn_problem(r, txn);
      if (!error.empty()) out.fail(connection_error(error));
      out.flag = txn.succeeded;
      f(std::move(out));
    });
  }, std::move(done));
}

}  // namespace dtrun::rendezvous::etcd_client
