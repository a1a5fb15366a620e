// Byte-level vectors for the TCPStore codec. The 1.13 bytes are what
// Debian's torch 1.13 client sends (see docs/tcpstore-protocol.md, verified
// on the wire); the 2.x bytes follow PyTorch's current sources.
#include <cstring>

#include <catch2/catch.hpp>

#include "rendezvous/wire_codec.h"

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
  CHECK(op_from_byte(dialect::v2, 18) == std::nullopt);
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
