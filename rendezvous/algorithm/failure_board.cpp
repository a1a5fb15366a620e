#include "rendezvous/algorithm/failure_board.h"

#include <algorithm>

#include <fmt/format.h>

namespace dtrun::rendezvous::failure_board {

namespace {

std::string key(const std::string& prefix, std::int64_t r, const std::string& rest) {
  return fmt::format("{}failures/{}/{}", prefix, r, rest);
}

}  // namespace

void publish(const std::shared_ptr<round_store>& store, const std::string& prefix,
             std::int64_t r, std::string record, std::function<void()> done) {
  store->add(key(prefix, r, "count"), 1,
             [store, prefix, r, record = std::move(record), done](store_result n) {
               if (n.error || n.number > max_records) return done();
               store->set(key(prefix, r, std::to_string(n.number)), record,
                          [done](store_result) { done(); });
             });
}

void read(const std::shared_ptr<round_store>& store, const std::string& prefix, std::int64_t r,
          std::function<void(std::vector<std::string>, std::size_t)> done) {
  store->add(key(prefix, r, "count"), 0, [store, prefix, r, done](store_result n) {
    if (n.error || n.number <= 0) return done({}, 0);
    auto total = static_cast<std::size_t>(n.number);
    std::vector<std::string> keys;
    for (std::int64_t i = 1; i <= std::min(n.number, max_records); ++i) {
      keys.push_back(key(prefix, r, std::to_string(i)));
    }
    // A record is SET right after its ADD; only a node that died in
    // between leaves a gap, so the wait is short and bounded.
    store->multi_get(keys, std::chrono::seconds(5), [done, total](store_result all) {
      std::vector<std::string> records;
      if (!all.error) records = std::move(all.values);
      done(std::move(records), total);
    });
  });
}

void mark_read(const std::shared_ptr<round_store>& store, const std::string& prefix,
               std::int64_t r, int members, std::function<void(bool)> done) {
  store->add(key(prefix, r, "read"), 1, [store, prefix, r, members, done](store_result n) {
    if (n.error) return done(false);
    if (n.number < members) return done(false);
    store->set(key(prefix, r, "all_read"), "1", [done](store_result) { done(true); });
  });
}

void await_all_read(const std::shared_ptr<round_store>& store, const std::string& prefix,
                    std::int64_t r, std::chrono::milliseconds timeout, std::function<void()> done) {
  store->wait({key(prefix, r, "all_read")}, timeout, [done](store_result) { done(); });
}

}  // namespace dtrun::rendezvous::failure_board
