// One behavioural suite for every store implementation: in-memory, TCP
// (both dialects against dtrun's server, and against it on 4 threads) and
// prefixed. A store that passes
// it can stand in for any other.
#include <catch2/catch.hpp>

#include <thread>

#include "rendezvous/store/memory_store.h"
#include "rendezvous/store/prefix_store.h"
#include "server_fixture.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

namespace {

struct memory_backend {
  std::shared_ptr<memory_store> shared = std::make_shared<memory_store>();
  std::shared_ptr<store> make() { return shared; }
  bool supports_2x_ops() const { return true; }
};

struct tcp_v2_backend {
  testing::server_thread server;
  std::shared_ptr<store> make() { return server.client(wire::dialect::v2); }
  bool supports_2x_ops() const { return true; }
};

struct tcp_v1_13_backend {
  testing::server_thread server;
  std::shared_ptr<store> make() { return server.client(wire::dialect::v1_13); }
  bool supports_2x_ops() const { return false; }  // no APPEND in 1.13
};

// dtrun-store serve --threads 4: the connections of one test land on
// different threads (round robin), so a wake-up crosses threads.
struct tcp_threaded_backend {
  testing::server_thread server{{.host = "127.0.0.1", .threads = 4}};
  std::shared_ptr<store> make() { return server.client(wire::dialect::v2); }
  bool supports_2x_ops() const { return true; }
};

struct prefix_backend {
  testing::server_thread server;
  std::shared_ptr<store> make() {
    return std::make_shared<prefix_store>("run/7", server.client(wire::dialect::v2));
  }
  bool supports_2x_ops() const { return true; }
};

}  // namespace

TEMPLATE_TEST_CASE("store contract", "[store]", memory_backend, tcp_v2_backend,
                   tcp_v1_13_backend, tcp_threaded_backend, prefix_backend) {
  TestType backend;
  auto s = backend.make();
  s->set_timeout(5s);

  SECTION("set then get returns the bytes, binary included") {
    std::string binary("\0\xff\n\x01", 4);
    s->set("k", binary);
    CHECK(s->get("k") == binary);
    s->set("k", "replaced");
    CHECK(s->get("k") == "replaced");
  }

  SECTION("add counts from zero and returns the new value") {
    CHECK(s->add("n", 5) == 5);
    CHECK(s->add("n", -2) == 3);
    CHECK(s->get("n") == "3");
  }

  SECTION("add on a non-number is an error") {
    s->set("text", "abc");
    CHECK_THROWS_AS(s->add("text", 1), store_error);
  }

  SECTION("compare_set in its four cases") {
    CHECK(s->compare_set("c", "", "first") == "first");
    CHECK(s->get("c") == "first");
    CHECK(s->compare_set("c", "first", "second") == "second");
    CHECK(s->compare_set("c", "wrong", "third") == "second");
    CHECK(s->get("c") == "second");
    CHECK(s->compare_set("absent", "expected", "desired") == "expected");
    CHECK_FALSE(s->check({"absent"}));
  }

  SECTION("check and delete_key") {
    CHECK_FALSE(s->check({"a"}));
    s->set("a", "1");
    s->set("b", "2");
    CHECK(s->check({"a", "b"}));
    CHECK_FALSE(s->check({"a", "missing"}));
    CHECK(s->delete_key("a"));
    CHECK_FALSE(s->delete_key("a"));
    CHECK_FALSE(s->check({"a"}));
  }

  SECTION("num_keys counts every key") {
    auto before = s->num_keys();
    s->set("x", "1");
    s->add("y", 1);
    CHECK(s->num_keys() == before + 2);
  }

  SECTION("wait times out naming the key") {
    auto start = std::chrono::steady_clock::now();
    try {
      s->wait({"never"}, 200ms);
      FAIL("wait returned");
    } catch (const store_timeout& e) {
      CHECK_THAT(e.what(), Catch::Contains("never"));
    }
    CHECK(std::chrono::steady_clock::now() - start >= 200ms);
    // The store is still usable after a timed-out wait.
    s->set("after", "ok");
    CHECK(s->get("after") == "ok");
  }

  SECTION("a blocked get is woken by another client's set") {
    auto writer = backend.make();
    std::thread t([&] {
      // The reader is blocked (or about to be); either way it must see it.
      writer->set("late", "value");
    });
    CHECK(s->get("late") == "value");
    t.join();
  }

  SECTION("wait on several keys returns only when all exist") {
    auto writer = backend.make();
    s->set("w1", "x");
    std::thread t([&] {
      writer->add("w2", 1);
    });
    s->wait({"w1", "w2"}, 5s);
    CHECK(s->check({"w1", "w2"}));
    t.join();
  }

  SECTION("multi_set and multi_get") {
    s->multi_set({"m1", "m2", "m3"}, {"a", "", "c"});
    CHECK(s->multi_get({"m3", "m1", "m2"}) == std::vector<std::string>{"c", "a", ""});
    CHECK_THROWS_AS(s->multi_set({"m1"}, {}), store_error);
  }

  if (backend.supports_2x_ops()) {
    SECTION("append creates and extends") {
      s->append("log", "a");
      s->append("log", "bc");
      CHECK(s->get("log") == "abc");
    }
  }
}

TEST_CASE("prefix_store keeps runs apart on one server") {
  testing::server_thread server;
  auto base = server.client();
  prefix_store run_a("run_a", base);
  prefix_store run_b("run_b", base);
  run_a.set("rank", "0");
  run_b.set("rank", "1");
  CHECK(run_a.get("rank") == "0");
  CHECK(run_b.get("rank") == "1");
  // PyTorch's wire layout: client "/" + prefix + "/" + key.
  auto raw = server.client(wire::dialect::v2, "");
  CHECK(raw->get("/run_a/rank") == "0");
}
