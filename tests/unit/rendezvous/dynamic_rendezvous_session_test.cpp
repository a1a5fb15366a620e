// A join whose store session is lost (etcd: the agent's own lease expired
// while it was stopped or cut off; the other nodes counted it gone) takes
// a new session and goes on joining, as the same arrival when it had
// arrived already (round_session_lost.cpp), over the in-memory store with
// a client that fails chosen requests the way the etcd client does once
// its lease is gone (store_session_lost).
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "memory_cluster.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/store/store.h"

namespace memory_cluster::session_lost_test {

namespace {

const char* const lease_gone =
    "etcd let this agent's lease expire (its TTL is 3 s; was the etcd cluster without quorum, "
    "or this machine suspended?)";

// Passes every request on, except ADD and WAIT requests that `drop` picks:
// those fail with store_session_lost, as the etcd client's do once the
// agent's lease is gone. Counts the ADD 1s that reached the store.
class session_dropping_store final : public round_store {
 public:
  using picker = std::function<bool(const std::string& op, const std::string& key)>;
  session_dropping_store(boost::asio::io_context& io, std::shared_ptr<round_store> inner,
                         picker drop, int& arrivals)
      : io_(io), inner_(std::move(inner)), drop_(std::move(drop)), arrivals_(arrivals) {}

  void connect(store_callback done) override { inner_->connect(std::move(done)); }
  void set(std::string k, std::string v, store_callback done) override {
    inner_->set(std::move(k), std::move(v), std::move(done));
  }
  void multi_set(std::vector<std::string> k, std::vector<std::string> v,
                 store_callback done) override {
    inner_->multi_set(std::move(k), std::move(v), std::move(done));
  }
  void get(std::string k, store_duration t, store_callback done) override {
    inner_->get(std::move(k), t, std::move(done));
  }
  void add(std::string k, std::int64_t d, store_callback done) override {
    if (d == 1 && drop_("add", k)) return lost(std::move(done));
    if (d == 1) ++arrivals_;
    inner_->add(std::move(k), d, std::move(done));
  }
  void compare_set(std::string k, std::string e, std::string d, store_callback done) override {
    inner_->compare_set(std::move(k), std::move(e), std::move(d), std::move(done));
  }
  void check(std::vector<std::string> k, store_callback done) override {
    inner_->check(std::move(k), std::move(done));
  }
  void wait(std::vector<std::string> k, store_duration t, store_callback done) override {
    if (k.size() == 1 && drop_("wait", k[0])) return lost(std::move(done));
    inner_->wait(std::move(k), t, std::move(done));
  }
  void delete_key(std::string k, store_callback done) override {
    inner_->delete_key(std::move(k), std::move(done));
  }
  void multi_get(std::vector<std::string> k, store_duration t, store_callback done) override {
    inner_->multi_get(std::move(k), t, std::move(done));
  }
  void read_now(std::vector<std::string> k, store_callback done) override {
    inner_->read_now(std::move(k), std::move(done));
  }
  void set_will(std::string w, std::string t, std::string v, store_callback done) override {
    inner_->set_will(std::move(w), std::move(t), std::move(v), std::move(done));
  }
  void withdraw_will(std::string w, store_callback done) override {
    inner_->withdraw_will(std::move(w), std::move(done));
  }
  void close() override { inner_->close(); }
  std::string local_address() const override { return inner_->local_address(); }

 private:
  void lost(store_callback done) {
    boost::asio::post(io_, [done = std::move(done)] {
      done(store_result::failed(std::make_exception_ptr(store_session_lost(lease_gone))));
    });
  }
  boost::asio::io_context& io_;
  std::shared_ptr<round_store> inner_;
  picker drop_;
  int& arrivals_;
};

struct session_cluster : cluster {
  int arrivals = 0;          // ADD 1s on `joined` that reached the store
  std::vector<int> connects;  // per node: clients made
  // Node `victim`'s requests that `drop` picks lose its session.
  session_cluster(int victim, session_dropping_store::picker drop) {
    wrap = [this, victim, drop](int node, std::shared_ptr<round_store> inner) {
      if (static_cast<std::size_t>(node) >= connects.size()) connects.resize(node + 1);
      ++connects[static_cast<std::size_t>(node)];
      auto picked = node == victim ? drop : [](const std::string&, const std::string&) {
        return false;
      };
      return std::make_shared<session_dropping_store>(io, std::move(inner), picked, arrivals);
    };
  }
};

const rendezvous_keys keys("job1");

// Both nodes met in round 0, each with its own group rank.
void check_both_ranked(const std::vector<round_result>& results) {
  for (const auto& r : results) {
    REQUIRE(r.done);
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 0);
    CHECK(r.info.group_world_size == 2);
  }
  CHECK(results[0].info.group_rank != results[1].info.group_rank);
}

}  // namespace

TEST_CASE("a join whose session is lost before it arrives takes a new one and arrives once",
          "[dynamic_rendezvous]") {
  int drops = 0;
  session_cluster c(1, [&](const std::string& op, const std::string& key) {
    return op == "add" && key == keys.joined(0) && drops++ == 0;
  });
  c.add(2, 2);
  c.add(2, 2);
  check_both_ranked(run_round(c));
  CHECK(c.arrivals == 2);  // no ghost arrival
  CHECK(c.connects.at(1) == 4);  // two sessions of two clients each
  CHECK(c.log_count("round 0: the rendezvous store dropped this agent's session "
                    "(etcd let this agent's lease expire") == 1);
}

TEST_CASE("a join whose session is lost after it arrived goes on as the same arrival",
          "[dynamic_rendezvous]") {
  int drops = 0;
  session_cluster c(0, [&](const std::string& op, const std::string& key) {
    return op == "wait" && key == keys.closed(0) && drops++ == 0;
  });
  c.add(2, 2);
  c.add(2, 2);
  check_both_ranked(run_round(c));
  CHECK(drops >= 1);
  CHECK(c.arrivals == 2);  // the round was not joined twice
  CHECK(c.connects.at(0) == 4);
}

TEST_CASE("a store that drops every session ends the join with why, after three new ones",
          "[dynamic_rendezvous]") {
  session_cluster c(0, [](const std::string& op, const std::string&) { return op == "add"; });
  c.add(1, 1);
  auto results = run_round(c);
  REQUIRE(results[0].done);
  REQUIRE(results[0].error);
  CHECK(kind_of(results[0].error) == store_error_kind::session_lost);
  CHECK_THAT(message_of(results[0].error), Catch::Contains("lease expire"));
  CHECK(c.connects.at(0) == 8);  // the first session and three new ones
  CHECK(c.log_count("joining again with a new one") == 3);
}

}  // namespace memory_cluster::session_lost_test
