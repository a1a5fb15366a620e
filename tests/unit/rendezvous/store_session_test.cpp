// The store's protocol logic without sockets: a hostile client's bytes go
// into store_session and what the server would hold and send comes out,
// so the memory caps can be checked exactly.
#include <catch2/catch.hpp>

#include <cstring>
#include <new>

#include "rendezvous/store/store_session.h"
#include "tests/unit/rendezvous/dialect_names.h"

using namespace dtrun::rendezvous;

namespace {

using testing::v1;
using testing::v2;

// The I/O side, by hand: output stays unsent until the test reads it, and
// close_soon is recorded, as the server posts it.
struct fake_connection final : session_host {
  fake_connection(store_context& ctx, std::string peer = "127.0.0.1:1") : core(ctx, *this, peer) {}

  void output_ready() override {
    CHECK_FALSE(core.closed());
    if (throw_on_output) throw std::bad_alloc();
  }
  void close_soon() override { ++close_requests; }

  void send(const std::string& bytes) {
    std::string_view rest = bytes;
    while (!rest.empty() && core.wants_input()) {
      auto space = core.read_space();
      auto n = std::min(space.size(), rest.size());
      std::memcpy(space.data(), rest.data(), n);
      rest.remove_prefix(n);
      core.received(n);
    }
  }
  void send(wire::dialect d, const wire::request& r) { send(wire::encode_request(d, r)); }

  // Everything the server would have written so far.
  std::string read() {
    auto out = core.take_output();
    core.output_sent();
    return out;
  }

  bool throw_on_output = false;
  int close_requests = 0;
  store_session core;
};

std::string validate() {
  return wire::encode_request(v2, {.kind = wire::op::validate, .nonce = wire::validation_magic});
}

struct logged_context : store_context {
  logged_context() {
    log = [this](const std::string& line) { lines.push_back(line); };
  }
  std::vector<std::string> lines;
};

}  // namespace

TEST_CASE("every watch of a session is removed when it closes") {
  logged_context ctx;
  {
    fake_connection watcher(ctx);
    watcher.send(v1, {.kind = wire::op::watch_key, .keys = {"/w1"}});
    watcher.send(v1, {.kind = wire::op::watch_key, .keys = {"/w2"}});
    CHECK(watcher.read() == "\x03\x03");
    CHECK(ctx.table.watch_count() == 2);
    watcher.core.close();
    CHECK(ctx.table.watch_count() == 0);
  }
  // The watcher is gone; a write to its keys must not reach it (ASan
  // catches a use after free here if it did).
  fake_connection writer(ctx);
  writer.send(v1, {.kind = wire::op::set, .keys = {"/w1"}, .values = {"v"}});
  writer.send(v1, {.kind = wire::op::add, .keys = {"ctr"}, .number = 1});
  std::string expected;
  wire::put_i64(expected, 1);
  CHECK(writer.read() == expected);
}

TEST_CASE("a request that announces a huge value costs only the bytes that arrived") {
  logged_context ctx;
  fake_connection evil(ctx);
  std::string head;
  wire::put_u8(head, 0);  // 1.13 SET
  wire::put_bytes(head, "/k");
  wire::put_u64(head, 64ull * 1024 * 1024);
  evil.send(head);
  CHECK(evil.core.input_capacity() <= 64 * 1024);
  // It keeps sending: the buffer grows with what arrives, not with 64 MiB.
  evil.send(std::string(1024 * 1024, 'x'));
  CHECK(evil.core.input_capacity() <= 2 * 1024 * 1024 + 64 * 1024 + 4096);
  CHECK(evil.close_requests == 0);
}

TEST_CASE("a MULTI_GET whose reply would pass the cap closes that client only") {
  logged_context ctx;
  ctx.limits.request.max_value_bytes = 1024 * 1024;
  fake_connection good(ctx), evil(ctx);
  good.send(validate());
  good.send(v2, {.kind = wire::op::set, .keys = {"big"}, .values = {std::string(1000000, 'b')}});
  evil.send(validate());
  evil.send(v2, {.kind = wire::op::multi_get, .keys = std::vector<std::string>(1000, "big")});
  CHECK(evil.close_requests == 1);
  CHECK_FALSE(evil.core.has_output());
  REQUIRE(ctx.lines.size() == 1);
  CHECK_THAT(ctx.lines[0], Catch::Contains("MULTI_GET reply of 1000008000 bytes exceeds the "
                                           "reply limit"));
  // Two copies fit, and the good client is still served.
  good.send(v2, {.kind = wire::op::multi_get, .keys = {"big", "missing"}});
  CHECK(good.read().size() == 8 + 1000000 + 8);
}

TEST_CASE("a watcher that never reads is dropped once its unsent events pass the cap") {
  logged_context ctx;
  ctx.limits.request.max_value_bytes = 1024 * 1024;
  ctx.limits.output_high_water = 4 * 1024 * 1024;
  fake_connection watcher(ctx), writer(ctx);
  watcher.send(v1, {.kind = wire::op::watch_key, .keys = {"/k"}});
  std::size_t most_unsent = 0;
  for (int i = 0; i < 150; ++i) {
    writer.send(v1, {.kind = wire::op::set, .keys = {"/k"}, .values = {std::string(1 << 20, 'v')}});
    most_unsent = std::max(most_unsent, watcher.core.unsent_bytes());
  }
  CHECK(watcher.close_requests == 1);
  CHECK(most_unsent <= ctx.limits.output_cap());
  CHECK_FALSE(watcher.core.has_output());
  CHECK_THAT(ctx.lines.at(0), Catch::Contains("it is not reading"));
  // The server closes it later; then it holds no watch.
  watcher.core.close();
  CHECK(ctx.table.watch_count() == 0);
  CHECK(writer.close_requests == 0);
}

TEST_CASE("pipelined GETs of a big value stop at the high-water mark") {
  logged_context ctx;
  ctx.limits.request.max_value_bytes = 1024 * 1024;
  ctx.limits.output_high_water = 2 * 1024 * 1024;
  fake_connection c(ctx);
  c.send(v1, {.kind = wire::op::set, .keys = {"/big"}, .values = {std::string(1 << 20, 'b')}});
  std::string gets;
  for (int i = 0; i < 100; ++i) gets += wire::encode_request(v1, {.kind = wire::op::get, .keys = {"/big"}});
  c.send(gets);
  CHECK_FALSE(c.core.wants_input());
  CHECK(c.core.unsent_bytes() <= ctx.limits.output_high_water + ctx.limits.reply_cap());
  // Reading resumes the held-back requests; every one is answered.
  std::size_t answered = 0;
  while (c.core.has_output()) answered += c.read().size();
  CHECK(answered == 100 * (8 + (1u << 20)));
  CHECK(c.close_requests == 0);
}

TEST_CASE("an APPEND cannot grow a value past the value cap") {
  logged_context ctx;
  ctx.limits.request.max_value_bytes = 100;
  fake_connection c(ctx);
  c.send(validate());
  c.send(v2, {.kind = wire::op::append, .keys = {"a"}, .values = {std::string(60, 'x')}});
  CHECK(c.close_requests == 0);
  c.send(v2, {.kind = wire::op::append, .keys = {"a"}, .values = {std::string(60, 'x')}});
  CHECK(c.close_requests == 1);
  CHECK(ctx.table.find("a")->size() == 60);
}

TEST_CASE("keys and peers in log lines are escaped") {
  logged_context ctx;
  fake_connection c(ctx, "peer\x1b[2J");
  c.send(v1, {.kind = wire::op::get, .keys = {"/x\ndtrun-store: forged"}});
  REQUIRE(ctx.lines.size() == 1);
  CHECK(ctx.lines[0].find('\n') == std::string::npos);
  CHECK(ctx.lines[0].find('\x1b') == std::string::npos);
  CHECK_THAT(ctx.lines[0], Catch::Contains("/x\\ndtrun-store: forged"));
}

TEST_CASE("an allocation failure while answering fails that client only") {
  logged_context ctx;
  fake_connection good(ctx), unlucky(ctx);
  unlucky.throw_on_output = true;
  unlucky.send(v1, {.kind = wire::op::add, .keys = {"/n"}, .number = 1});
  CHECK(unlucky.close_requests == 1);
  CHECK_THAT(ctx.lines.at(0), Catch::Contains("out of memory"));
  good.send(v1, {.kind = wire::op::add, .keys = {"/n"}, .number = 1});
  std::string expected;
  wire::put_i64(expected, 2);
  CHECK(good.read() == expected);
}

TEST_CASE("a large MULTI_SET right behind a CANCEL_WAIT, arriving in pieces, parses whole") {
  logged_context ctx;
  fake_connection c(ctx);
  c.send(validate());
  c.send(v2, {.kind = wire::op::wait, .keys = {"closed"}});
  CHECK(c.read().empty());
  wire::request set{.kind = wire::op::multi_set};
  for (int i = 0; i < 1024; ++i) {
    set.keys.push_back("r/0/assign/" + std::to_string(i));
    set.values.push_back(std::string(140, 'a'));
  }
  set.keys.push_back("closed");
  set.values.push_back("1024");
  auto batch = wire::encode_request(v2, {.kind = wire::op::cancel_wait}) +
               wire::encode_request(v2, set) +
               wire::encode_request(v2, {.kind = wire::op::wait, .keys = {"closed"}});
  // As the socket delivers it: a first piece, then 4 KiB at a time.
  std::string_view rest = batch;
  std::size_t piece = 1000;
  while (!rest.empty()) {
    auto n = std::min(piece, rest.size());
    c.send(std::string(rest.substr(0, n)));
    rest.remove_prefix(n);
    piece = 4096;
  }
  CHECK(c.read() == std::string("\x01\x00", 2));  // WAIT_CANCELED, then STOP_WAITING
  CHECK(ctx.table.find("closed") != nullptr);
  CHECK(c.close_requests == 0);
}

namespace {

// torch 2.15's BARRIER as its client writes it (TCPStore.cpp): byte 18,
// the key, the world size as i64.
std::string barrier(const std::string& key, std::int64_t world_size) {
  std::string out;
  wire::put_u8(out, 18);
  wire::put_bytes(out, key);
  wire::put_i64(out, world_size);
  return out;
}

}  // namespace

TEST_CASE("a BARRIER answers every arrival STOP_WAITING when the last one comes") {
  logged_context ctx;
  fake_connection a(ctx), b(ctx), c(ctx);
  for (auto* conn : {&a, &b, &c}) conn->send(validate());
  a.send(barrier("/b", 3));
  b.send(barrier("/b", 3));
  CHECK(a.read().empty());
  CHECK(b.read().empty());
  c.send(barrier("/b", 3));
  CHECK(a.read() == std::string(1, '\0'));
  CHECK(b.read() == std::string(1, '\0'));
  CHECK(c.read() == std::string(1, '\0'));
  CHECK(*ctx.table.find("/b") == "3");
}

TEST_CASE("a timed-out BARRIER is cancelled like a WAIT and its client stays usable") {
  logged_context ctx;
  fake_connection late(ctx), second(ctx), third(ctx);
  for (auto* conn : {&late, &second, &third}) conn->send(validate());
  late.send(barrier("/b", 3));
  late.send(v2, {.kind = wire::op::cancel_wait});
  CHECK(late.read() == std::string(1, '\x01'));  // WAIT_CANCELED
  second.send(barrier("/b", 3));
  third.send(barrier("/b", 3));  // the cancelled arrival still counts
  CHECK(second.read() == std::string(1, '\0'));
  CHECK(third.read() == std::string(1, '\0'));
  CHECK(late.read().empty());
  late.send(v2, {.kind = wire::op::get, .keys = {"/b"}});
  CHECK(late.read() == std::string("\x01\0\0\0\0\0\0\0" "3", 9));
  CHECK(late.close_requests == 0);
}

TEST_CASE("a BARRIER on a non-number closes that client and loses nobody's data") {
  logged_context ctx;
  fake_connection evil(ctx), waiting(ctx);
  waiting.send(validate());
  waiting.send(barrier("/ctr", 3));
  evil.send(validate());
  evil.send(v2, {.kind = wire::op::set, .keys = {"/text"}, .values = {"abc"}});
  evil.send(barrier("/text", 2));
  CHECK(evil.close_requests == 1);
  CHECK_THAT(ctx.lines.at(0), Catch::Contains("BARRIER on key '/text'"));
  evil.core.close();
  CHECK(*ctx.table.find("/text") == "abc");
  CHECK(*ctx.table.find("/ctr") == "1");
  // The others' barrier goes on; an arrival that closed is never called
  // back (ASan sees a use after free if it were), but it stays counted.
  {
    fake_connection gone(ctx);
    gone.send(validate());
    gone.send(barrier("/ctr", 3));
    gone.core.close();
  }
  fake_connection last(ctx);
  last.send(validate());
  last.send(barrier("/ctr", 3));
  CHECK(waiting.read() == std::string(1, '\0'));
  CHECK(last.read() == std::string(1, '\0'));
  CHECK(*ctx.table.find("/ctr") == "3");
}

TEST_CASE("a torch 1.13 connection has no BARRIER") {
  logged_context ctx;
  fake_connection old(ctx);
  old.send(barrier("/b", 1));
  CHECK(old.close_requests == 1);
  CHECK(ctx.table.find("/b") == nullptr);
}
