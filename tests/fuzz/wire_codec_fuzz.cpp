// Feeds arbitrary bytes to the request parser in both dialects, the way a
// connection would: detect the dialect, then parse requests back to back.
// Every complete request is re-encoded and re-parsed (it must round-trip)
// and applied to a key table, so the semantics run on hostile input too.
// The same bytes are then read as a server's replies to one op (picked by
// the first byte, MULTI_GET's key count by the second), back to back;
// every complete reply must re-encode, with the server's encoders, to the
// bytes it was parsed from.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "rendezvous/store/server_key_table.h"
#include "rendezvous/store/wire_codec.h"

using namespace dtrun::rendezvous;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

void apply(key_table& table, const wire::request& r) {
  using wire::op;
  switch (r.kind) {
    case op::set: table.set(r.keys[0], r.values[0]); break;
    case op::compare_set: table.compare_set(r.keys[0], r.values[0], r.values[1]); break;
    case op::add: table.add(r.keys[0], r.number); break;
    case op::append: table.append(r.keys[0], r.values[0]); break;
    case op::delete_key: table.erase(r.keys[0]); break;
    case op::wait: table.cancel(table.wait(r.keys, [] {})); break;
    case op::check: table.check(r.keys); break;
    case op::queue_push: table.queue_push(r.keys[0], r.values[0]); break;
    case op::queue_pop: table.queue_pop(r.keys[0]); break;
    case op::barrier:
      if (auto handle = table.barrier(r.keys[0], r.number, [] {}); handle) table.cancel(*handle);
      break;
    default: break;
  }
}

// The server's encoding of `r` (what parse_reply read it from).
std::string encode_reply(const wire::reply& r) {
  using wire::reply_shape;
  std::string out;
  switch (wire::reply_shape_of(r.kind)) {
    case reply_shape::none: break;
    case reply_shape::byte: wire::put_byte_reply(out, r.byte); break;
    case reply_shape::cancel:
      if (r.stop_waiting_first) wire::put_byte_reply(out, wire::wait_stop_waiting);
      wire::put_byte_reply(out, r.byte);  // any byte: the parser takes it as the last
      break;
    case reply_shape::number: wire::put_number_reply(out, r.number); break;
    case reply_shape::nonce: wire::put_nonce_reply(out, r.nonce); break;
    case reply_shape::value: wire::put_value_reply(out, r.value); break;
    case reply_shape::values: {
      std::vector<std::string_view> views(r.values.begin(), r.values.end());
      wire::put_values_reply(out, views);
      break;
    }
    case reply_shape::counted_values:
      check(r.number == static_cast<std::int64_t>(r.values.size()));
      wire::put_counted_values_reply(out, r.values);
      break;
    case reply_shape::queue_item:
      wire::put_queue_item_reply(out, r.number,
                                 r.number > 0 ? std::optional<std::string_view>(r.value)
                                              : std::nullopt);
      break;
  }
  return out;
}

void fuzz_replies(std::span<const std::uint8_t> input) {
  if (input.size() < 2) return;
  constexpr int ops = static_cast<int>(wire::op::barrier) + 1;
  const auto answered = static_cast<wire::op>(input[0] % ops);
  const std::size_t keys = input[1] % 8;
  input = input.subspan(2);
  for (int replies = 0; replies < 64; ++replies) {
    auto r = wire::parse_reply(answered, input, keys, 256);
    if (r.status != wire::parse_status::complete) {
      check(r.status == wire::parse_status::bad || r.bytes_wanted > input.size());
      return;
    }
    check(r.consumed <= input.size());
    auto again = encode_reply(r.rep);
    check(again.size() == r.consumed);
    check(std::memcmp(again.data(), input.data(), again.size()) == 0);
    if (r.consumed == 0) return;  // a reply of no bytes: the same again
    input = input.subspan(r.consumed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Small caps so the fuzzer reaches the limit checks quickly.
  wire::limits caps{.max_key_bytes = 64, .max_value_bytes = 256, .max_keys = 16,
                    .max_request_bytes = 1024};
  std::span<const std::uint8_t> input(data, size);
  fuzz_replies(input);
  auto d = wire::detect_dialect(input);
  if (!d) return 0;
  key_table table;
  while (!input.empty()) {
    auto r = wire::parse_request(*d, input, caps);
    if (r.status != wire::parse_status::complete) {
      check(r.status == wire::parse_status::bad || r.bytes_wanted > input.size());
      break;
    }
    check(r.consumed > 0 && r.consumed <= input.size());
    auto again = wire::encode_request(*d, r.req);
    check(again.size() == r.consumed);
    check(std::memcmp(again.data(), input.data(), again.size()) == 0);
    apply(table, r.req);
    input = input.subspan(r.consumed);
  }
  return 0;
}
