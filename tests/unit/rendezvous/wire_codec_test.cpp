// Byte-level vectors for the TCPStore codec. The 1.13 bytes are what
// Debian's torch 1.13 client sends (see docs/store.md, verified on the
// wire); the 2.x bytes follow PyTorch's current sources. Replies: the table
// in docs/store.md, "Replies".
#include <cstring>
#include <limits>

#include <catch2/catch.hpp>

#include "rendezvous/store/wire_codec.h"

using namespace dtrun::rendezvous::wire;

namespace {

std::vector<std::uint8_t> bytes(std::initializer_list<int> list) {
  std::vector<std::uint8_t> out;
  for (int b : list) out.push_back(static_cast<std::uint8_t>(b));
  return out;
}

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<std::uint8_t> cat(std::vector<std::uint8_t> a, const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// u64 little-endian length followed by the text.
std::vector<std::uint8_t> str(const std::string& s) {
  std::string out;
  put_bytes(out, s);
  return bytes(out);
}

}  // namespace

TEST_CASE("1.13 ADD of init/ parses from the recorded bytes") {
  auto wire_bytes = cat(cat(bytes({3}), str("init/")), bytes({1, 0, 0, 0, 0, 0, 0, 0}));
  auto r = parse_request(dialect::v1_13, wire_bytes);
  REQUIRE(r.status == parse_status::complete);
  CHECK(r.consumed == 1 + 8 + 5 + 8);
  CHECK(r.req.kind == op::add);
  CHECK(r.req.keys == std::vector<std::string>{"init/"});
  CHECK(r.req.number == 1);
}

TEST_CASE("the same byte means different commands in the two dialects") {
  CHECK(op_from_byte(dialect::v1_13, 0) == op::set);
  CHECK(op_from_byte(dialect::v2, 0) == op::validate);
  CHECK(op_from_byte(dialect::v1_13, 3) == op::add);
  CHECK(op_from_byte(dialect::v2, 3) == op::get);
  CHECK(op_from_byte(dialect::v1_13, 7) == op::watch_key);
  CHECK(op_from_byte(dialect::v2, 7) == op::num_keys);
  CHECK(op_from_byte(dialect::v1_13, 9) == std::nullopt);
  CHECK(op_from_byte(dialect::v2, 13) == op::ping);
  CHECK(op_from_byte(dialect::v2, 17) == op::list_keys);
  CHECK(op_from_byte(dialect::v2, 18) == op::barrier);  // torch 2.15
  CHECK(op_from_byte(dialect::v2, 19) == std::nullopt);
  CHECK(byte_for(dialect::v1_13, op::append) == std::nullopt);
  CHECK(byte_for(dialect::v2, op::cancel_wait) == 12);
}

TEST_CASE("encode_request writes the documented layout") {
  SECTION("2.x validate is 00 CE F7 85 3C") {
    CHECK(bytes(encode_request(dialect::v2, {.kind = op::validate, .nonce = validation_magic})) ==
          bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}));
  }
  SECTION("1.13 SET") {
    auto expected = cat(cat(bytes({0}), str("/k")), str("v"));
    CHECK(bytes(encode_request(dialect::v1_13, {.kind = op::set, .keys = {"/k"}, .values = {"v"}})) ==
          expected);
  }
  SECTION("2.x WAIT with two keys") {
    auto expected = cat(cat(cat(bytes({6}), bytes({2, 0, 0, 0, 0, 0, 0, 0})), str("a")), str("bb"));
    CHECK(bytes(encode_request(dialect::v2, {.kind = op::wait, .keys = {"a", "bb"}})) == expected);
  }
  SECTION("commands a dialect lacks are refused") {
    CHECK_THROWS_AS(encode_request(dialect::v1_13, {.kind = op::ping}), std::invalid_argument);
  }
}

TEST_CASE("the 2.x hello read by torch 1.13 is a SET whose key length is over 2 to the 63") {
  // 1.13 reads byte 0 as SET and bytes 1..8 as the key's u64 length; at or
  // above 2^63 std::vector refuses it before allocating (1.13 then drops
  // the connection), whatever pid seeded the nonce.
  for (std::uint32_t seed : {0u, 1u, 255u, 65535u, 4194304u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    CAPTURE(seed);
    std::string hello =
        encode_request(dialect::v2, {.kind = op::validate, .nonce = validation_magic}) +
        encode_request(dialect::v2, {.kind = op::ping, .nonce = handshake_nonce(seed)});
    REQUIRE(hello.size() == 10);
    CHECK(op_from_byte(dialect::v1_13, static_cast<std::uint8_t>(hello[0])) == op::set);
    std::uint64_t key_length = 0;
    std::memcpy(&key_length, hello.data() + 1, sizeof key_length);
    CHECK(key_length >= (std::uint64_t{1} << 63));
  }
}

TEST_CASE("every request round-trips through encode and parse") {
  std::vector<request> requests = {
      {.kind = op::set, .keys = {"/a"}, .values = {std::string("\0\1\2", 3)}},
      {.kind = op::compare_set, .keys = {"k"}, .values = {"", "new"}},
      {.kind = op::get, .keys = {"k"}},
      {.kind = op::add, .keys = {"n"}, .number = -42},
      {.kind = op::check, .keys = {"a", "b", "c"}},
      {.kind = op::wait, .keys = {}},
      {.kind = op::num_keys},
      {.kind = op::delete_key, .keys = {"k"}},
      {.kind = op::append, .keys = {"k"}, .values = {"tail"}},
      {.kind = op::multi_get, .keys = {"x", "y"}},
      {.kind = op::multi_set, .keys = {"x", "y"}, .values = {"1", "2"}},
      {.kind = op::cancel_wait},
      {.kind = op::ping, .nonce = 0xDEADBEEF},
      {.kind = op::queue_push, .keys = {"q"}, .values = {"item"}},
      {.kind = op::queue_pop, .keys = {"q"}},
      {.kind = op::queue_len, .keys = {"q"}},
      {.kind = op::list_keys},
      {.kind = op::barrier, .keys = {"/b"}, .number = 4},
  };
  for (const auto& original : requests) {
    CAPTURE(op_name(original.kind));
    for (auto d : {dialect::v1_13, dialect::v2}) {
      if (!byte_for(d, original.kind)) continue;
      auto encoded = bytes(encode_request(d, original));
      auto parsed = parse_request(d, encoded);
      REQUIRE(parsed.status == parse_status::complete);
      CHECK(parsed.consumed == encoded.size());
      CHECK(parsed.req.kind == original.kind);
      CHECK(parsed.req.keys == original.keys);
      CHECK(parsed.req.values == original.values);
      CHECK(parsed.req.number == original.number);
      CHECK(parsed.req.nonce == original.nonce);
      // Every strict prefix is incomplete, never bad: requests arrive in
      // fragments.
      for (std::size_t cut = 0; cut < encoded.size(); ++cut) {
        auto partial = parse_request(d, std::span(encoded.data(), cut));
        REQUIRE(partial.status == parse_status::need_more);
        CHECK(partial.bytes_wanted > cut);
        CHECK(partial.bytes_wanted <= encoded.size());
      }
    }
  }
}

TEST_CASE("two pipelined requests parse one at a time") {
  auto first = bytes(encode_request(dialect::v2, {.kind = op::get, .keys = {"a"}}));
  auto both = cat(first, bytes(encode_request(dialect::v2, {.kind = op::num_keys})));
  auto r = parse_request(dialect::v2, both);
  REQUIRE(r.status == parse_status::complete);
  CHECK(r.consumed == first.size());
  auto rest = parse_request(dialect::v2, std::span(both).subspan(r.consumed));
  REQUIRE(rest.status == parse_status::complete);
  CHECK(rest.req.kind == op::num_keys);
}

TEST_CASE("oversized or unknown input is rejected before it is buffered") {
  limits caps;
  caps.max_key_bytes = 16;
  caps.max_value_bytes = 32;
  caps.max_keys = 4;
  SECTION("a key length over the cap") {
    auto r = parse_request(dialect::v1_13, cat(bytes({2}), bytes({17, 0, 0, 0, 0, 0, 0, 0})), caps);
    CHECK(r.status == parse_status::bad);
    CHECK_THAT(r.error, Catch::Contains("key of 17 bytes exceeds the limit of 16"));
  }
  SECTION("a value length of 2^40") {
    auto r = parse_request(dialect::v1_13,
                           cat(cat(bytes({0}), str("k")), bytes({0, 0, 0, 0, 0, 1, 0, 0})), caps);
    CHECK(r.status == parse_status::bad);
  }
  SECTION("a key count over the cap") {
    auto r = parse_request(dialect::v2, cat(bytes({5}), bytes({5, 0, 0, 0, 0, 0, 0, 0})), caps);
    CHECK(r.status == parse_status::bad);
  }
  SECTION("a count of 2^64-1 does not allocate") {
    auto r = parse_request(dialect::v2, cat(bytes({5}), bytes({255, 255, 255, 255, 255, 255, 255, 255})));
    CHECK(r.status == parse_status::bad);
  }
  SECTION("unknown command bytes") {
    CHECK(parse_request(dialect::v1_13, bytes({9})).status == parse_status::bad);
    CHECK(parse_request(dialect::v2, bytes({200})).status == parse_status::bad);
  }
  SECTION("a total request size over the cap") {
    caps.max_request_bytes = 40;
    caps.max_keys = 100;
    std::vector<std::string> keys(10, "0123456789");
    auto encoded = bytes(encode_request(dialect::v2, {.kind = op::check, .keys = keys}));
    CHECK(parse_request(dialect::v2, encoded, caps).status == parse_status::bad);
  }
}

TEST_CASE("the dialect is decided by the first five bytes") {
  CHECK(detect_dialect(bytes({})) == std::nullopt);
  CHECK(detect_dialect(bytes({0})) == std::nullopt);
  CHECK(detect_dialect(bytes({0, 0xCE, 0xF7, 0x85})) == std::nullopt);
  CHECK(detect_dialect(bytes({0, 0xCE, 0xF7, 0x85, 0x3C})) == dialect::v2);
  CHECK(detect_dialect(bytes({3, 5, 0})) == dialect::v1_13);      // 1.13 ADD init/
  CHECK(detect_dialect(bytes({0, 5, 0, 0})) == dialect::v1_13);   // 1.13 SET
  CHECK(detect_dialect(bytes({1})) == dialect::v1_13);            // 1.13 COMPARE_SET
}

TEST_CASE("a multi-key request arriving in pieces is checked from where the last piece stopped") {
  std::vector<std::uint8_t> encoded = cat(bytes({10}), bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  for (const char* k : {"alpha", "beta", "gamma"}) encoded = cat(encoded, str(k));
  const std::size_t second_item = 9 + 8 + 5, third_item = second_item + 8 + 4;
  parse_progress progress;
  auto r = parse_request(dialect::v2, std::span(encoded.data(), third_item + 3), {}, &progress);
  REQUIRE(r.status == parse_status::need_more);
  CHECK(progress.position == third_item);
  CHECK(progress.items_left == 1);
  CHECK(r.bytes_wanted == third_item + 8);
  // The checked items are not read again: the request is built in one pass
  // once whole, and gives what a single parse gives.
  r = parse_request(dialect::v2, encoded, {}, &progress);
  REQUIRE(r.status == parse_status::complete);
  CHECK(r.consumed == encoded.size());
  CHECK(r.req.keys == std::vector<std::string>{"alpha", "beta", "gamma"});
  CHECK(progress.position == 0);
}

TEST_CASE("a resumed check still rejects an item over the caps") {
  limits caps;
  caps.max_key_bytes = 4;
  auto encoded = cat(cat(cat(bytes({11}), bytes({2, 0, 0, 0, 0, 0, 0, 0})), str("ok")), str("v"));
  parse_progress progress;
  auto r = parse_request(dialect::v2, encoded, caps, &progress);
  REQUIRE(r.status == parse_status::need_more);
  encoded = cat(cat(encoded, str("too long")), str("v"));
  r = parse_request(dialect::v2, encoded, caps, &progress);
  REQUIRE(r.status == parse_status::bad);
  CHECK(r.error == "MULTI_SET: key of 8 bytes exceeds the limit of 4");
  CHECK(progress.position == 0);
}

// --- replies ---------------------------------------------------------------

namespace {

constexpr std::uint64_t no_cap = std::numeric_limits<std::uint64_t>::max();

std::vector<std::uint8_t> i64(std::int64_t v) {
  std::string out;
  put_i64(out, v);
  return bytes(out);
}

struct reply_case {
  const char* name;
  op answered;
  std::size_t keys;
  std::string encoded;  // as the server's encoders write it
  reply expected;       // kind is filled in by the test
};

std::vector<reply_case> reply_cases() {
  std::vector<reply_case> cases;
  auto add = [&](const char* name, op answered, std::size_t keys, auto encode, reply expected) {
    std::string out;
    encode(out);
    cases.push_back({name, answered, keys, std::move(out), std::move(expected)});
  };
  add("SET: nothing", op::set, 1, [](std::string&) {}, {});
  add("CHECK: not ready", op::check, 2,
      [](std::string& o) { put_byte_reply(o, check_not_ready); }, {.byte = check_not_ready});
  add("WAIT: stop waiting", op::wait, 1,
      [](std::string& o) { put_byte_reply(o, wait_stop_waiting); }, {.byte = wait_stop_waiting});
  add("WATCH_KEY: registered", op::watch_key, 1,
      [](std::string& o) { put_byte_reply(o, watch_callback_registered); },
      {.byte = watch_callback_registered});
  add("CANCEL_WAIT alone", op::cancel_wait, 0, [](std::string& o) { put_cancel_reply(o); },
      {.byte = wait_canceled});
  add("CANCEL_WAIT after the wait's STOP_WAITING", op::cancel_wait, 0,
      [](std::string& o) {
        put_byte_reply(o, wait_stop_waiting);
        put_cancel_reply(o);
      },
      {.byte = wait_canceled, .stop_waiting_first = true});
  add("ADD: a negative sum", op::add, 1, [](std::string& o) { put_number_reply(o, -42); },
      {.number = -42});
  add("DELETE_KEY", op::delete_key, 1, [](std::string& o) { put_number_reply(o, 1); },
      {.number = 1});
  add("PING", op::ping, 0, [](std::string& o) { put_nonce_reply(o, 0xDEADBEEF); },
      {.nonce = 0xDEADBEEF});
  add("GET: binary value", op::get, 1,
      [](std::string& o) { put_value_reply(o, std::string("\0\1\xff", 3)); },
      {.value = std::string("\0\1\xff", 3)});
  add("COMPARE_SET: empty value", op::compare_set, 1,
      [](std::string& o) { put_value_reply(o, ""); }, {});
  add("MULTI_GET: three values", op::multi_get, 3,
      [](std::string& o) {
        std::vector<std::string_view> v{"a", "", "ccc"};
        put_values_reply(o, v);
      },
      {.values = {"a", "", "ccc"}});
  add("LIST_KEYS: two keys", op::list_keys, 0,
      [](std::string& o) {
        std::vector<std::string> v{"x", "yy"};
        put_counted_values_reply(o, v);
      },
      {.number = 2, .values = {"x", "yy"}});
  add("QUEUE_POP: an item", op::queue_pop, 1,
      [](std::string& o) { put_queue_item_reply(o, 3, "job"); }, {.number = 3, .value = "job"});
  add("QUEUE_POP: empty", op::queue_pop, 1,
      [](std::string& o) { put_queue_item_reply(o, 0, std::nullopt); }, {});
  return cases;
}

void check_reply(const reply& got, const reply& expected) {
  CHECK(got.kind == expected.kind);
  CHECK(got.byte == expected.byte);
  CHECK(got.stop_waiting_first == expected.stop_waiting_first);
  CHECK(got.number == expected.number);
  CHECK(got.nonce == expected.nonce);
  CHECK(got.value == expected.value);
  CHECK(got.values == expected.values);
}

}  // namespace

TEST_CASE("each op's reply has the shape PyTorch's servers write") {
  CHECK(reply_shape_of(op::set) == reply_shape::none);
  CHECK(reply_shape_of(op::multi_set) == reply_shape::none);
  CHECK(reply_shape_of(op::validate) == reply_shape::none);
  CHECK(reply_shape_of(op::check) == reply_shape::byte);
  CHECK(reply_shape_of(op::wait) == reply_shape::byte);
  CHECK(reply_shape_of(op::barrier) == reply_shape::byte);
  CHECK(reply_shape_of(op::cancel_wait) == reply_shape::cancel);
  CHECK(reply_shape_of(op::add) == reply_shape::number);
  CHECK(reply_shape_of(op::num_keys) == reply_shape::number);
  CHECK(reply_shape_of(op::queue_len) == reply_shape::number);
  CHECK(reply_shape_of(op::ping) == reply_shape::nonce);
  CHECK(reply_shape_of(op::compare_set) == reply_shape::value);
  CHECK(reply_shape_of(op::multi_get) == reply_shape::values);
  CHECK(reply_shape_of(op::list_keys) == reply_shape::counted_values);
  CHECK(reply_shape_of(op::queue_pop) == reply_shape::queue_item);
}

TEST_CASE("the reply encoders write the documented bytes") {
  std::string out;
  SECTION("PING echoes the nonce little-endian") {
    put_nonce_reply(out, 0x01020304);
    CHECK(bytes(out) == bytes({4, 3, 2, 1}));
  }
  SECTION("QUEUE_POP: the length before the pop, then the value") {
    put_queue_item_reply(out, 2, "first");
    CHECK(bytes(out) == cat(i64(2), str("first")));
  }
  SECTION("an empty QUEUE_POP is the length alone") {
    put_queue_item_reply(out, 0, std::nullopt);
    CHECK(bytes(out) == i64(0));
  }
  SECTION("LIST_KEYS: an i64 count, then the keys") {
    std::vector<std::string> keys{"/k", "/m"};
    put_counted_values_reply(out, keys);
    CHECK(bytes(out) == cat(cat(i64(2), str("/k")), str("/m")));
  }
  SECTION("MULTI_GET: the values, no count") {
    std::vector<std::string_view> values{"v", ""};
    put_values_reply(out, values);
    CHECK(bytes(out) == cat(str("v"), str("")));
  }
  SECTION("CANCEL_WAIT") {
    put_cancel_reply(out);
    CHECK(bytes(out) == bytes({1}));
  }
  SECTION("a watch event, and the sizes reply caps are checked with") {
    put_watch_event(out, watch_key_updated, "key", "old", "newer");
    CHECK(bytes(out) == cat(cat(cat(bytes({0}), str("key")), str("old")), str("newer")));
    CHECK(out.size() == watch_event_bytes(3, 3, 5));
    CHECK(value_bytes(5) == str("12345").size());
  }
}

TEST_CASE("every reply parses complete only once its last byte has arrived") {
  for (auto& c : reply_cases()) {
    CAPTURE(c.name);
    c.expected.kind = c.answered;
    auto encoded = bytes(c.encoded);
    auto whole = parse_reply(c.answered, encoded, c.keys, no_cap);
    REQUIRE(whole.status == parse_status::complete);
    CHECK(whole.consumed == encoded.size());
    check_reply(whole.rep, c.expected);
    // Byte by byte, as a reader sees it: need_more, asking for more than
    // it has and no more than the reply, until the last byte.
    for (std::size_t cut = 0; cut < encoded.size(); ++cut) {
      CAPTURE(cut);
      auto partial = parse_reply(c.answered, std::span(encoded.data(), cut), c.keys, no_cap);
      REQUIRE(partial.status == parse_status::need_more);
      CHECK(partial.bytes_wanted > cut);
      CHECK(partial.bytes_wanted <= encoded.size());
      CHECK(partial.rep.values.empty());
      CHECK(partial.rep.value.empty());
    }
  }
}

TEST_CASE("two replies back to back: consumed stops at the end of the first") {
  SECTION("two GETs") {
    auto both = cat(str("first"), str("second"));
    auto r = parse_reply(op::get, both, 1, no_cap);
    REQUIRE(r.status == parse_status::complete);
    CHECK(r.consumed == 8 + 5);
    CHECK(r.rep.value == "first");
    auto rest = parse_reply(op::get, std::span(both).subspan(r.consumed), 1, no_cap);
    REQUIRE(rest.status == parse_status::complete);
    CHECK(rest.rep.value == "second");
  }
  SECTION("a MULTI_GET of two keys leaves the third value alone") {
    auto three = cat(cat(str("a"), str("b")), str("c"));
    auto r = parse_reply(op::multi_get, three, 2, no_cap);
    REQUIRE(r.status == parse_status::complete);
    CHECK(r.consumed == 2 * 9);
    CHECK(r.rep.values == std::vector<std::string>{"a", "b"});
  }
  SECTION("WAIT_CANCELED, then an ADD whose first byte is 0") {
    auto both = cat(bytes({wait_canceled}), i64(256));
    auto r = parse_reply(op::cancel_wait, both, 0, no_cap);
    REQUIRE(r.status == parse_status::complete);
    CHECK(r.consumed == 1);
    CHECK_FALSE(r.rep.stop_waiting_first);
    auto add = parse_reply(op::add, std::span(both).subspan(1), 1, no_cap);
    REQUIRE(add.status == parse_status::complete);
    CHECK(add.rep.number == 256);
  }
  SECTION("a reply of no bytes consumes none") {
    auto r = parse_reply(op::set, i64(7), 1, no_cap);
    REQUIRE(r.status == parse_status::complete);
    CHECK(r.consumed == 0);
  }
}

TEST_CASE("a MULTI_GET of no keys is complete with no bytes") {
  auto r = parse_reply(op::multi_get, bytes({}), 0, no_cap);
  REQUIRE(r.status == parse_status::complete);
  CHECK(r.consumed == 0);
  CHECK(r.rep.values.empty());
  auto followed = parse_reply(op::multi_get, str("next"), 0, no_cap);
  REQUIRE(followed.status == parse_status::complete);
  CHECK(followed.consumed == 0);
  CHECK(followed.rep.values.empty());
}

TEST_CASE("a reply value over the cap is bad as soon as its length arrives") {
  SECTION("GET") {
    auto r = parse_reply(op::get, i64(11), 1, 10);  // the length alone, no payload yet
    REQUIRE(r.status == parse_status::bad);
    CHECK(r.error == "GET reply: value of 11 bytes exceeds the limit of 10");
  }
  SECTION("at the cap is fine") {
    auto r = parse_reply(op::get, str("0123456789"), 1, 10);
    REQUIRE(r.status == parse_status::complete);
    CHECK(r.rep.value == "0123456789");
  }
  SECTION("the second value of a MULTI_GET") {
    auto r = parse_reply(op::multi_get, cat(str("ok"), i64(1000)), 3, 10);
    REQUIRE(r.status == parse_status::bad);
    CHECK_THAT(r.error, Catch::Contains("MULTI_GET reply: value of 1000 bytes"));
  }
  SECTION("a QUEUE_POP item") {
    auto r = parse_reply(op::queue_pop, cat(i64(1), i64(11)), 1, 10);
    REQUIRE(r.status == parse_status::bad);
    CHECK_THAT(r.error, Catch::Contains("QUEUE_POP reply: value of 11 bytes"));
  }
  SECTION("a length of 2^64-1") {
    auto r = parse_reply(op::compare_set, bytes({255, 255, 255, 255, 255, 255, 255, 255}), 1,
                         limits{}.max_value_bytes);
    REQUIRE(r.status == parse_status::bad);
  }
  SECTION("a negative count or queue length") {
    auto list = parse_reply(op::list_keys, i64(-1), 0, 10);
    REQUIRE(list.status == parse_status::bad);
    CHECK(list.error == "LIST_KEYS reply: negative count -1");
    CHECK(parse_reply(op::queue_pop, i64(-5), 1, 10).status == parse_status::bad);
  }
}

TEST_CASE("a huge announced length is waited for, never allocated") {
  // Under an (absurd) cap, a 4 EiB value is merely incomplete: nothing is
  // sized by it, and bytes_wanted says exactly where the reply would end.
  const std::uint64_t huge = std::uint64_t{1} << 62;
  auto r = parse_reply(op::get, cat(i64(static_cast<std::int64_t>(huge)), bytes({'x'})), 1, no_cap);
  REQUIRE(r.status == parse_status::need_more);
  CHECK(r.bytes_wanted == 8 + huge);
  // A LIST_KEYS announcing 2^62 keys reserves nothing either.
  auto list = parse_reply(op::list_keys, cat(i64(static_cast<std::int64_t>(huge)), str("k")), 0,
                          no_cap);
  REQUIRE(list.status == parse_status::need_more);
  CHECK(list.bytes_wanted == 8 + 9 + 8);
  // A length that would wrap the position around is bad, not "wanted".
  auto wrap = parse_reply(op::get, bytes({255, 255, 255, 255, 255, 255, 255, 255}), 1, no_cap);
  CHECK(wrap.status == parse_status::bad);
}
