// The one place where etcd's JSON replies are read. Every reply of the
// gateway (docs/etcd.md) is checked field by field against the shape etcd
// writes before anything uses it, and turned into plain structs; a reply of
// another shape is an error string saying which field is wrong, never a
// library exception. Absent fields are etcd's defaults (proto3 JSON omits
// zeros, false and empty lists); 64-bit integers come as decimal strings
// (or numbers from some proxies); keys and values are base64.
//
// Pure: no I/O, no Boost, so the etcd reply fuzzer (tests/fuzz) runs it
// alone. Nothing here throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::rendezvous {

struct etcd_kv {
  std::string key, value;  // decoded
  std::int64_t create_revision = 0, mod_revision = 0, version = 0;
};

// A range (kv/range, or a txn's response_range).
struct etcd_range {
  std::vector<etcd_kv> kvs;
  std::int64_t count = 0;
  std::int64_t revision = 0;  // the header's
};

// One response of a txn. Only what dtrun reads: ranges and put's prev_kv.
struct etcd_txn_response {
  std::optional<etcd_range> range;     // response_range
  std::optional<etcd_kv> put_prev_kv;  // response_put.prev_kv
};

struct etcd_txn {
  bool succeeded = false;
  std::vector<etcd_txn_response> responses;
  std::int64_t revision = 0;
};

struct etcd_event {
  bool deleted = false;
  std::string key;         // decoded, with the key prefix
  std::string value;       // decoded (empty for a delete)
  std::string prev_value;  // decoded; only with prev_kv
  std::int64_t revision = 0;
};

// One line of a watch stream.
struct etcd_watch_message {
  bool created = false;
  bool canceled = false;
  std::int64_t compact_revision = 0;  // > 0: our start revision was compacted
  std::string cancel_reason;
  std::vector<etcd_event> events;
};

// Each returns "" when `body` (the reply's text) has the shape of that
// call's reply and fills `out`; otherwise what is wrong ("`succeeded` is a
// string, not true or false"), without the member's name, which the
// caller adds.
std::string parse_range(std::string_view body, etcd_range& out);
std::string parse_txn(std::string_view body, etcd_txn& out);
// lease/grant: the lease's ID as the decimal text etcd writes.
std::string parse_lease_grant(std::string_view body, std::string& id);
// lease/keepalive: the remaining TTL in seconds; 0 when the lease is gone.
std::string parse_keepalive(std::string_view body, std::int64_t& ttl);
std::string parse_watch_message(std::string_view line, etcd_watch_message& out);
// kv/deleterange: how many keys it deleted.
std::string parse_delete(std::string_view body, std::int64_t& deleted);
// Any other reply (put, revoke): only that it is a JSON object.
std::string parse_object(std::string_view body);

// A reply whose HTTP status is not 200, from `member`: what it says, as one
// line ("HTTP 503: etcdserver: no leader (10.0.0.1:2379)"), and whether
// another try, here or on another member, may succeed (a 502/503/504, or
// gRPC's UNAVAILABLE or DEADLINE_EXCEEDED: no leader or no quorum yet).
struct etcd_http_failure {
  std::string line;
  bool retryable = false;
};
etcd_http_failure describe_http_failure(int status, std::string_view body,
                                        const std::string& member);

// Base64 as etcd's JSON gateway carries keys and values.
std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace dtrun::rendezvous
