#include <catch2/catch.hpp>

#include <map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/algorithm/heartbeat_ring.h"

using namespace dtrun::rendezvous;
namespace asio = boost::asio;

namespace {

// Only ADD is used by the ring: counters in a map, replies from the loop.
class counter_store final : public round_store {
 public:
  explicit counter_store(asio::io_context& io) : io_(io) {}
  std::map<std::string, std::int64_t> counters;
  int adds_of(const std::string& key) const {
    auto it = added.find(key);
    return it == added.end() ? 0 : it->second;
  }

  void add(std::string key, std::int64_t delta, store_callback done) override {
    auto n = counters[key] += delta;
    if (delta != 0) ++added[key];
    asio::post(io_, [done, n] {
      store_result r;
      r.number = n;
      done(r);
    });
  }
  void connect(store_callback) override {}
  void set(std::string, std::string, store_callback) override {}
  void multi_set(std::vector<std::string>, std::vector<std::string>, store_callback) override {}
  void get(std::string, store_duration, store_callback) override {}
  void compare_set(std::string, std::string, std::string, store_callback) override {}
  void check(std::vector<std::string>, store_callback) override {}
  void wait(std::vector<std::string>, store_duration, store_callback) override {}
  void delete_key(std::string, store_callback) override {}
  void multi_get(std::vector<std::string>, store_duration, store_callback) override {}
  void read_now(std::vector<std::string>, store_callback) override {}
  void set_will(std::string, std::string, std::string, store_callback) override {}
  void withdraw_will(std::string, store_callback) override {}
  void close() override {}
  std::string local_address() const override { return {}; }

 private:
  asio::io_context& io_;
  std::map<std::string, int> added;
};

std::string hb(int rank) { return "hb/" + std::to_string(rank); }

}  // namespace

TEST_CASE("a successor that never beats is declared lost once, after max_attempt beats") {
  asio::io_context io;
  auto store = std::make_shared<counter_store>(io);
  auto ring = std::make_shared<heartbeat_ring>(
      io, heartbeat_ring::settings{.interval = std::chrono::milliseconds(0), .max_attempt = 3});
  std::vector<int> lost;
  ring->start(store, hb(1));
  ring->watch(hb(2), 7, [&](int successor) {
    lost.push_back(successor);
    ring->stop();
  });
  io.run();  // ends once the ring stopped: nothing else is pending
  CHECK(lost == std::vector<int>{7});
  // The first read sets the baseline, then three misses.
  CHECK(store->adds_of(hb(1)) >= 4);
  CHECK(store->adds_of(hb(2)) == 0);
}

TEST_CASE("members that beat are never declared lost, and a stopped ring does nothing more") {
  asio::io_context io;
  auto store = std::make_shared<counter_store>(io);
  heartbeat_ring::settings fast{.interval = std::chrono::milliseconds(0), .max_attempt = 2};
  std::vector<std::shared_ptr<heartbeat_ring>> rings;
  int lost = 0;
  for (int arrival = 1; arrival <= 3; ++arrival) {
    rings.push_back(std::make_shared<heartbeat_ring>(io, fast));
    rings.back()->start(store, hb(arrival));
    rings.back()->watch(hb(arrival % 3 + 1), arrival % 3, [&](int) { ++lost; });
  }
  // Run until the first has beaten 50 times, then stop everyone.
  while (store->adds_of(hb(1)) < 50) io.run_one();
  for (auto& r : rings) r->stop();
  auto beats = store->counters[hb(1)];
  io.run();
  CHECK(lost == 0);
  CHECK(store->counters[hb(1)] == beats);
}

TEST_CASE("a node beats from its start, so one that learns its rank last is not lost") {
  // The predecessor learns its rank and watches at once; the successor,
  // started at the same time, has not learnt its rank after many more
  // intervals than max_attempt, yet it is beating, so it is not lost.
  asio::io_context io;
  auto store = std::make_shared<counter_store>(io);
  heartbeat_ring::settings fast{.interval = std::chrono::milliseconds(0), .max_attempt = 2};
  auto first = std::make_shared<heartbeat_ring>(io, fast);
  auto late = std::make_shared<heartbeat_ring>(io, fast);
  int lost = 0;
  first->start(store, hb(1));
  late->start(store, hb(2));
  first->watch(hb(2), 1, [&](int) { ++lost; });
  while (store->adds_of(hb(1)) < 20) io.run_one();
  CHECK(lost == 0);
  // Now it stops beating (hung): it is declared lost.
  late->stop();
  while (lost == 0 && store->adds_of(hb(1)) < 40) io.run_one();
  first->stop();
  CHECK(lost == 1);
}

TEST_CASE("a new watch starts counting misses afresh") {
  asio::io_context io;
  auto store = std::make_shared<counter_store>(io);
  heartbeat_ring::settings fast{.interval = std::chrono::milliseconds(0), .max_attempt = 3};
  auto ring = std::make_shared<heartbeat_ring>(io, fast);
  std::vector<int> lost;
  ring->start(store, hb(1));
  ring->watch(hb(2), 1, [&](int s) { lost.push_back(s); });
  // Two misses of hb/2 (a baseline, then two reads that did not move) ...
  while (store->adds_of(hb(1)) < 3) io.run_one();
  // ... then a restart of the ring for a new round with a new successor.
  ring->start(store, hb(5));
  ring->watch(hb(6), 4, [&](int s) {
    lost.push_back(s);
    ring->stop();
  });
  io.run();
  CHECK(lost == std::vector<int>{4});
  CHECK(store->adds_of(hb(5)) >= 4);
}
