// Feeds arbitrary bytes to the request parser in both dialects, the way a
// connection would: detect the dialect, then parse requests back to back.
// Every complete request is re-encoded and re-parsed (it must round-trip)
// and applied to a key table, so the semantics run on hostile input too.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "rendezvous/server_key_table.h"
#include "rendezvous/wire_codec.h"

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
    default: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Small caps so the fuzzer reaches the limit checks quickly.
  wire::limits caps{.max_key_bytes = 64, .max_value_bytes = 256, .max_keys = 16,
                    .max_request_bytes = 1024};
  std::span<const std::uint8_t> input(data, size);
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
