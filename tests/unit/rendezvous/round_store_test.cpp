// The error vocabulary of store results (round_store.h): each failure's
// kind, set where the result is made, and the one callback of writes
// nobody waits for, which logs a failure once.
#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/memory_round_store.h"
#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

TEST_CASE("kind_of names each store error class", "[round_store]") {
  CHECK(kind_of(nullptr) == store_error_kind::none);
  CHECK(kind_of(std::make_exception_ptr(store_timeout("t"))) == store_error_kind::timeout);
  CHECK(kind_of(std::make_exception_ptr(store_wait_timeout("w"))) ==
        store_error_kind::wait_timeout);
  CHECK(kind_of(std::make_exception_ptr(store_connection_error("c"))) ==
        store_error_kind::connection_lost);
  CHECK(kind_of(std::make_exception_ptr(store_closed_error("c"))) == store_error_kind::closed);
  CHECK(kind_of(std::make_exception_ptr(store_corrupt_reply("r"))) ==
        store_error_kind::corrupt_reply);
  CHECK(kind_of(store_error_ptr("e")) == store_error_kind::other);
  CHECK(kind_of(std::make_exception_ptr(std::runtime_error("x"))) == store_error_kind::other);
  CHECK(kind_of(std::make_exception_ptr(42)) == store_error_kind::other);
}

TEST_CASE("a failed result carries its error, its kind and its message", "[round_store]") {
  auto r = store_result::failed(std::make_exception_ptr(store_wait_timeout("wait for 'k'")));
  CHECK(r.error);
  CHECK(r.kind == store_error_kind::wait_timeout);
  CHECK(r.message() == "wait for 'k'");
  CHECK_THROWS_AS(std::rethrow_exception(r.error), store_wait_timeout);

  store_result ok;
  CHECK(ok.kind == store_error_kind::none);
  CHECK(ok.message().empty());
  CHECK(error_message(std::make_exception_ptr(42)) == "unknown error");
}

TEST_CASE("memory_round_store results carry the kind of their failure", "[round_store]") {
  boost::asio::io_context io;
  memory_round_server server(io);
  auto c = server.client();
  std::vector<store_result> got;
  auto keep = [&](store_result r) { got.push_back(std::move(r)); };
  server.set("text", "not a number");
  c->wait({"never"}, 10ms, keep);
  c->add("text", 1, keep);
  c->set("fine", "1", keep);
  io.run();
  io.restart();
  c->close();
  c->set("late", "1", keep);
  io.run();
  REQUIRE(got.size() == 4);
  CHECK(got[0].kind == store_error_kind::wait_timeout);
  CHECK(got[1].kind == store_error_kind::other);
  CHECK(got[1].message() == "add: the value of key 'text' is not a number");
  CHECK(got[2].kind == store_error_kind::none);
  CHECK_FALSE(got[2].error);
  CHECK(got[3].kind == store_error_kind::closed);  // closed here, by close()
  CHECK(got[3].message() == "the connection to the store was closed");
}

TEST_CASE("unheeded_writes logs a failure once per write and kind", "[round_store]") {
  std::vector<std::string> log;
  unheeded_writes unheeded([&](const std::string& line) { log.push_back(line); });
  auto lost = store_result::failed(
      std::make_exception_ptr(store_connection_error("the connection to the store was closed")));
  auto slow = store_result::failed(std::make_exception_ptr(store_timeout("set timed out")));

  unheeded("publish the status")(store_result{});
  CHECK(log.empty());
  for (int i = 0; i < 5; ++i) unheeded("publish the status")(lost);
  REQUIRE(log.size() == 1);
  CHECK(log[0] == "could not publish the status: the connection to the store was closed");
  unheeded("publish the status")(slow);       // another kind
  unheeded("withdraw the will")(lost);        // another write
  auto copy = unheeded;                       // copies share what was logged
  copy("withdraw the will")(lost);
  REQUIRE(log.size() == 3);
  CHECK(log[1] == "could not publish the status: set timed out");
  CHECK(log[2] == "could not withdraw the will: the connection to the store was closed");

  auto outlives = unheeded_writes([&](const std::string& line) { log.push_back(line); })("x");
  outlives(lost);  // the helper is gone; its callback still logs
  CHECK(log.size() == 4);

  // A write dropped because this side closed the client (the round ended,
  // the node shuts down) is nothing to report: it used to add a line after
  // the rendezvous failure, which must stay the last.
  unheeded("publish the round's ranks")(store_result::failed(
      std::make_exception_ptr(store_closed_error("the client of 127.0.0.1:1 was closed"))));
  CHECK(log.size() == 4);

  // Silenced (its owner reported a failure of its own), then resumed.
  auto late = store_result::failed(std::make_exception_ptr(store_timeout("no answer in 2 ms")));
  unheeded.silence();
  unheeded("publish the round's ranks")(late);
  CHECK(log.size() == 4);
  unheeded.resume();
  unheeded("publish the round's ranks")(late);
  REQUIRE(log.size() == 5);
  CHECK(log[4] == "could not publish the round's ranks: no answer in 2 ms");
}
