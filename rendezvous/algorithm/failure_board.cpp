#include "rendezvous/algorithm/failure_board.h"

#include <algorithm>

namespace dtrun::rendezvous::failure_board {

void publish(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
             std::int64_t r, std::string record, std::function<void()> done) {
  store->add(keys.failure_count(r), 1,
             [store, keys, r, record = std::move(record), done](store_result n) {
               if (n.error || n.number > max_records) return done();
               store->set(keys.failure(r, n.number), record,
                          [done](store_result) { done(); });
             });
}

void read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys, std::int64_t r,
          std::function<void(std::vector<std::string>, std::size_t)> done) {
  store->add(keys.failure_count(r), 0, [store, keys, r, done](store_result n) {
    if (n.error || n.number <= 0) return done({}, 0);
    auto total = static_cast<std::size_t>(n.number);
    std::vector<std::string> wanted;
    for (std::int64_t i = 1; i <= std::min(n.number, max_records); ++i) {
      wanted.push_back(keys.failure(r, i));
    }
    // A record is SET right after its ADD; only a node that died in
    // between leaves a gap, so the wait is short and bounded.
    store->multi_get(wanted, std::chrono::seconds(5), [done, total](store_result all) {
      std::vector<std::string> records;
      if (!all.error) records = std::move(all.values);
      done(std::move(records), total);
    });
  });
}

void mark_read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
               std::int64_t r, int members, std::function<void(bool)> done) {
  store->add(keys.failures_read(r), 1, [store, keys, r, members, done](store_result n) {
    if (n.error) return done(false);
    if (n.number < members) return done(false);
    store->set(keys.failures_all_read(r), "1", [done](store_result) { done(true); });
  });
}

void await_all_read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
                    std::int64_t r, std::chrono::milliseconds timeout, std::function<void()> done) {
  store->wait({keys.failures_all_read(r)}, timeout, [done](store_result) { done(); });
}

}  // namespace dtrun::rendezvous::failure_board
