#include <limits>

#include <catch2/catch.hpp>

#include "rendezvous/store/server_key_table.h"
#include "rendezvous/store/wire_codec.h"

using namespace dtrun::rendezvous;

TEST_CASE("a wait completes when its last key is written, once") {
  key_table table;
  int fired = 0;
  auto handle = table.wait({"a", "b"}, [&] { ++fired; });
  REQUIRE(handle != nullptr);
  CHECK(handle->remaining == 2);
  table.set("a", "1");
  CHECK(fired == 0);
  table.add("b", 1);
  CHECK(fired == 1);
  table.set("b", "again");
  CHECK(fired == 1);
}

TEST_CASE("a wait on keys that exist answers at once") {
  key_table table;
  table.set("a", "1");
  CHECK(table.wait({"a"}, [] { FAIL("callback for a ready wait"); }) == nullptr);
}

TEST_CASE("a cancelled wait is forgotten") {
  key_table table;
  int fired = 0;
  auto handle = table.wait({"k"}, [&] { ++fired; });
  table.cancel(handle);
  table.cancel(handle);  // idempotent
  table.set("k", "v");
  CHECK(fired == 0);
}

TEST_CASE("many waiters on one key all wake, and compare_set wakes them") {
  key_table table;
  int fired = 0;
  std::vector<wait_handle> handles;
  for (int i = 0; i < 100; ++i) handles.push_back(table.wait({"k"}, [&] { ++fired; }));
  CHECK(table.compare_set("k", "", "v") == "v");
  CHECK(fired == 100);
}

TEST_CASE("delete does not wake waiters, and append and multi-step writes do") {
  key_table table;
  int fired = 0;
  table.set("k", "v");
  CHECK(table.erase("k"));
  auto handle = table.wait({"k"}, [&] { ++fired; });
  CHECK_FALSE(table.erase("k"));
  CHECK(fired == 0);
  table.append("k", "x");
  CHECK(fired == 1);
  CHECK(*table.find("k") == "x");
}

TEST_CASE("a queue push satisfies one waiter and pop returns items in order") {
  key_table table;
  int first = 0, second = 0;
  auto h1 = table.wait({"q"}, [&] { ++first; });
  auto h2 = table.wait({"q"}, [&] { ++second; });
  table.queue_push("q", "one");
  CHECK(first + second == 1);
  table.queue_push("q", "two");
  CHECK(first + second == 2);
  CHECK(table.queue_len("q") == 2);
  CHECK(table.check({"q"}));
  auto [len, value] = table.queue_pop("q");
  CHECK(len == 2);
  CHECK(value == "one");
  CHECK(table.queue_pop("q").second == "two");
  auto [empty_len, nothing] = table.queue_pop("q");
  CHECK(empty_len == 0);
  CHECK_FALSE(nothing.has_value());
}

TEST_CASE("watchers see created, updated and deleted events") {
  key_table table;
  std::vector<std::tuple<int, std::string, std::string>> events;
  auto id = table.watch("k", [&](std::uint8_t e, const std::string&, std::string_view old_value,
                                 std::string_view new_value) {
    events.emplace_back(e, std::string(old_value), std::string(new_value));
  });
  table.set("k", "1");
  table.add("k", 1);
  table.erase("k");
  table.set("other", "x");
  table.unwatch(id);
  table.set("k", "ignored");
  REQUIRE(events.size() == 3);
  CHECK(events[0] == std::tuple{int(wire::watch_key_created), std::string(), std::string("1")});
  CHECK(events[1] == std::tuple{int(wire::watch_key_updated), std::string("1"), std::string("2")});
  CHECK(events[2] == std::tuple{int(wire::watch_key_deleted), std::string("2"), std::string()});
}

TEST_CASE("list_keys is sorted and add rejects text") {
  key_table table;
  table.set("b", "1");
  table.set("a", "x");
  CHECK(table.list_keys() == std::vector<std::string>{"a", "b"});
  CHECK(table.add("a", 1) == std::nullopt);
  CHECK(*table.find("a") == "x");
  CHECK(table.size() == 2);
}

TEST_CASE("a watch callback may remove watches and add new ones") {
  key_table table;
  int first = 0, second = 0, added = 0;
  std::uint64_t second_id = 0;
  auto first_id = table.watch("k", [&](std::uint8_t, const std::string&, std::string_view,
                                       std::string_view) {
    ++first;
    table.unwatch(second_id);  // a session closing from inside another's write
    table.watch("k", [&](std::uint8_t, const std::string&, std::string_view,
                         std::string_view) { ++added; });
  });
  second_id = table.watch("k", [&](std::uint8_t, const std::string&, std::string_view,
                                   std::string_view) { ++second; });
  table.set("k", "1");
  CHECK(first == 1);
  CHECK(second == 0);  // removed before its turn
  CHECK(added == 0);   // added during the event: sees later ones only
  table.unwatch(first_id);
  table.set("k", "2");
  CHECK(first == 1);
  CHECK(added == 1);
  CHECK(table.watch_count() == 1);
}

TEST_CASE("cancelling many waits at once forgets only those") {
  key_table table;
  int fired_cancelled = 0, fired_kept = 0;
  std::vector<wait_handle> cancelled;
  for (int i = 0; i < 3; ++i) cancelled.push_back(table.wait({"k", "k"}, [&] { ++fired_cancelled; }));
  cancelled.push_back(table.wait({"other", "k"}, [&] { ++fired_cancelled; }));
  auto kept = table.wait({"k"}, [&] { ++fired_kept; });
  table.cancel(std::span<const wait_handle>(cancelled));
  for (const auto& h : cancelled) CHECK(h->remaining == 0);
  table.set("other", "v");
  table.set("k", "v");
  CHECK(fired_cancelled == 0);
  CHECK(fired_kept == 1);
}

TEST_CASE("unwatching a list of ids removes exactly those watches") {
  key_table table;
  std::vector<int> seen;
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(table.watch("k", [&seen, i](std::uint8_t, const std::string&, std::string_view,
                                              std::string_view) { seen.push_back(i); }));
  }
  std::vector<std::uint64_t> gone{ids[0], ids[2], ids[3]};
  table.unwatch(gone);
  CHECK(table.watch_count() == 1);
  table.set("k", "v");
  CHECK(seen == std::vector<int>{1});
}

TEST_CASE("clear forgets keys and queues but keeps pending waits") {
  key_table table;
  table.set("a", "1");
  table.queue_push("q", "x");
  int fired = 0;
  auto handle = table.wait({"b"}, [&] { ++fired; });
  std::vector<std::string> deleted;
  table.watch("a", [&](std::uint8_t, const std::string& key, std::string_view,
                       std::string_view) { deleted.push_back(key); });
  table.clear();
  CHECK(table.size() == 0);
  CHECK(table.find("a") == nullptr);
  CHECK(table.queue_len("q") == 0);
  CHECK(deleted == std::vector<std::string>{"a"});
  table.set("b", "2");
  CHECK(fired == 1);
}

TEST_CASE("a barrier counts arrivals and the last one releases every earlier one") {
  key_table table;
  int released = 0, waited = 0;
  auto watcher = table.wait({"b"}, [&] { ++waited; });  // a plain WAIT on the key
  auto first = table.barrier("b", 3, [&] { ++released; });
  REQUIRE(first);
  REQUIRE(*first != nullptr);
  CHECK(*table.find("b") == "1");
  // The second arrival writes the count but wakes nobody: the earlier
  // arrival and the WAIT stay (as on PyTorch's servers).
  auto second = table.barrier("b", 3, [&] { ++released; });
  REQUIRE(second);
  CHECK(*table.find("b") == "2");
  CHECK(released == 0);
  CHECK(waited == 0);
  auto last = table.barrier("b", 3, [] { FAIL("the last arrival waits for nobody"); });
  REQUIRE(last);
  CHECK(*last == nullptr);
  CHECK(released == 2);
  CHECK(waited == 1);
  CHECK(*table.find("b") == "3");
  // Late arrivals pass at once, and the count goes on.
  CHECK(table.barrier("b", 3, [] {}) == wait_handle());
  CHECK(*table.find("b") == "4");
}

TEST_CASE("a barrier of one or fewer passes, and one on text changes nothing") {
  key_table table;
  CHECK(table.barrier("one", 1, [] {}) == wait_handle());
  CHECK(table.barrier("none", 0, [] {}) == wait_handle());
  CHECK(table.barrier("negative", -5, [] {}) == wait_handle());
  table.set("text", "abc");
  CHECK(table.barrier("text", 2, [] {}) == std::nullopt);
  CHECK(*table.find("text") == "abc");
  table.set("full", std::to_string(std::numeric_limits<std::int64_t>::max()));
  CHECK(table.barrier("full", 2, [] {}) == std::nullopt);
  // Counted like ADD: an ADD's counter and a barrier's are the same number.
  table.add("shared", 5);
  CHECK(table.barrier("shared", 6, [] {}) == wait_handle());
  CHECK(*table.find("shared") == "6");
}

TEST_CASE("a cancelled barrier arrival stays counted and is never called back") {
  key_table table;
  auto gone = table.barrier("b", 2, [] { FAIL("a cancelled arrival was called back"); });
  REQUIRE(gone);
  table.cancel(*gone);
  // PyTorch's servers keep the count of an arrival whose client gave up.
  CHECK(table.barrier("b", 2, [] {}) == wait_handle());
  CHECK(*table.find("b") == "2");
}

TEST_CASE("a write to a barrier's key releases the arrivals waiting on it") {
  key_table table;
  int released = 0;
  auto waiting = table.barrier("b", 5, [&] { ++released; });
  table.add("b", 10);
  CHECK(released == 1);
}
