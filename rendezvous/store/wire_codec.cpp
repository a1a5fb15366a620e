#include "rendezvous/store/wire_codec.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/store/wire_cursor.h"

namespace dtrun::rendezvous::wire {
namespace {

// Command numbering per dialect; index = byte value.
constexpr std::array v1_13_ops{op::set,       op::compare_set, op::get,       op::add,
                               op::check,     op::wait,        op::num_keys,  op::watch_key,
                               op::delete_key};

constexpr std::array v2_ops{op::validate,    op::set,        op::compare_set, op::get,
                            op::add,         op::check,      op::wait,        op::num_keys,
                            op::delete_key,  op::append,     op::multi_get,   op::multi_set,
                            op::cancel_wait, op::ping,       op::queue_push,  op::queue_pop,
                            op::queue_len,   op::list_keys,  op::barrier};

template <std::size_t n>
std::optional<std::uint8_t> find_byte(const std::array<op, n>& table, op o) {
  for (std::size_t i = 0; i < n; ++i) {
    if (table[i] == o) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}


// What follows a command's byte (docs/store.md): each command's layout,
// named once here, so the reader and the writer cannot disagree on it.
enum class body {
  nonce,            // u32: VALIDATE, PING
  key_value,        // key, value: SET, APPEND, QUEUE_PUSH
  key_two_values,   // key, expected, desired: COMPARE_SET
  key_number,       // key, i64: ADD, BARRIER
  key,              // GET, DELETE_KEY, WATCH_KEY, QUEUE_POP, QUEUE_LEN
  keys,             // count, keys: CHECK, WAIT, MULTI_GET
  key_value_pairs,  // count, (key, value)...: MULTI_SET
  nothing,          // GETNUMKEYS, CANCEL_WAIT, LIST_KEYS
};

body body_of(op kind) {
  switch (kind) {
    case op::validate:
    case op::ping:
      return body::nonce;
    case op::set:
    case op::append:
    case op::queue_push:
      return body::key_value;
    case op::compare_set:
      return body::key_two_values;
    case op::add:
    case op::barrier:
      return body::key_number;
    case op::get:
    case op::delete_key:
    case op::watch_key:
    case op::queue_pop:
    case op::queue_len:
      return body::key;
    case op::check:
    case op::wait:
    case op::multi_get:
      return body::keys;
    case op::multi_set:
      return body::key_value_pairs;
    case op::num_keys:
    case op::cancel_wait:
    case op::list_keys:
      return body::nothing;
  }
  return body::nothing;
}

void read_fields(op kind, cursor& c, request& r) {
  switch (body_of(kind)) {
    case body::nonce:
      r.nonce = c.value<std::uint32_t>();
      break;
    case body::key_value:
      r.keys.push_back(c.key());
      r.values.push_back(c.payload());
      break;
    case body::key_two_values:
      r.keys.push_back(c.key());
      r.values.push_back(c.payload());
      r.values.push_back(c.payload());
      break;
    case body::key_number:
      r.keys.push_back(c.key());
      r.number = c.value<std::int64_t>();
      break;
    case body::key:
      r.keys.push_back(c.key());
      break;
    case body::keys: {
      auto n = c.count();
      // Grow as bytes arrive; never reserve from an untrusted count.
      for (std::uint64_t i = 0; i < n && c.ok(); ++i) r.keys.push_back(c.key());
      break;
    }
    case body::key_value_pairs: {
      auto n = c.count();
      for (std::uint64_t i = 0; i < n && c.ok(); ++i) {
        r.keys.push_back(c.key());
        r.values.push_back(c.payload());
      }
      break;
    }
    case body::nothing:
      break;
  }
}

}  // namespace

std::string_view op_name(op o) {
  switch (o) {
    case op::validate: return "VALIDATE";
    case op::set: return "SET";
    case op::compare_set: return "COMPARE_SET";
    case op::get: return "GET";
    case op::add: return "ADD";
    case op::check: return "CHECK";
    case op::wait: return "WAIT";
    case op::num_keys: return "GETNUMKEYS";
    case op::watch_key: return "WATCH_KEY";
    case op::delete_key: return "DELETE_KEY";
    case op::append: return "APPEND";
    case op::multi_get: return "MULTI_GET";
    case op::multi_set: return "MULTI_SET";
    case op::cancel_wait: return "CANCEL_WAIT";
    case op::ping: return "PING";
    case op::queue_push: return "QUEUE_PUSH";
    case op::queue_pop: return "QUEUE_POP";
    case op::queue_len: return "QUEUE_LEN";
    case op::list_keys: return "LIST_KEYS";
    case op::barrier: return "BARRIER";
  }
  return "UNKNOWN";
}

std::optional<op> op_from_byte(dialect d, std::uint8_t byte) {
  if (d == dialect::v1_13) {
    if (byte < v1_13_ops.size()) return v1_13_ops[byte];
  } else if (byte < v2_ops.size()) {
    return v2_ops[byte];
  }
  return std::nullopt;
}

std::optional<std::uint8_t> byte_for(dialect d, op o) {
  return d == dialect::v1_13 ? find_byte(v1_13_ops, o) : find_byte(v2_ops, o);
}

namespace {

bool is_multi_key(op kind) {
  return kind == op::check || kind == op::wait || kind == op::multi_get ||
         kind == op::multi_set;
}

// Walks the items of a multi-key request from where `progress` stopped,
// checking lengths and caps without copying. Returns false with `c` short
// (progress saved at the last whole item) or bad.
bool check_items(op kind, cursor& c, parse_progress& progress) {
  if (progress.position == 0) {
    c.value<std::uint8_t>();
    progress.items_left = c.count();
    if (!c.ok()) return false;
  }
  while (progress.items_left > 0) {
    const std::size_t item_start = c.position();
    c.skip_key();
    if (kind == op::multi_set) c.skip_payload();
    if (!c.ok()) {
      if (c.is_short()) progress.position = item_start;
      return false;
    }
    --progress.items_left;
  }
  return true;
}

}  // namespace

parse_result parse_request(dialect d, std::span<const std::uint8_t> input, const limits& caps,
                           parse_progress* progress) {
  parse_result result;
  if (input.empty()) {
    result.bytes_wanted = 1;
    return result;
  }
  auto kind = op_from_byte(d, input[0]);
  if (!kind) {
    result.status = parse_status::bad;
    result.error = "unknown command byte " + std::to_string(input[0]);
    return result;
  }
  if (progress != nullptr && is_multi_key(*kind)) {
    cursor check(input, caps, progress->position);
    if (!check_items(*kind, check, *progress)) {
      if (!check.error().empty()) {
        *progress = {};
        result.status = parse_status::bad;
        result.error = std::string(op_name(*kind)) + ": " + check.error();
      } else {
        result.bytes_wanted = check.wanted();
      }
      return result;
    }
    *progress = {};  // whole: built below in one pass
  }
  cursor c(input, caps);
  c.value<std::uint8_t>();
  result.req.kind = *kind;
  read_fields(*kind, c, result.req);

  if (!c.error().empty()) {
    result.status = parse_status::bad;
    result.error = std::string(op_name(*kind)) + ": " + c.error();
  } else if (c.is_short()) {
    result.status = parse_status::need_more;
    result.bytes_wanted = c.wanted();
    result.req = {};
  } else {
    result.status = parse_status::complete;
    result.consumed = c.position();
  }
  return result;
}

std::optional<dialect> detect_dialect(std::span<const std::uint8_t> first_bytes) {
  // VALIDATE (0) followed by the magic, little-endian.
  constexpr std::array<std::uint8_t, 5> handshake{0x00, 0xCE, 0xF7, 0x85, 0x3C};
  const std::size_t n = std::min(first_bytes.size(), handshake.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (first_bytes[i] != handshake[i]) return dialect::v1_13;
  }
  if (n == handshake.size()) return dialect::v2;
  return std::nullopt;
}

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }

namespace {
template <typename T>
void put_raw(std::string& out, T v) {
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  out.append(raw, sizeof(T));
}
}  // namespace

void put_u32(std::string& out, std::uint32_t v) { put_raw(out, v); }
void put_u64(std::string& out, std::uint64_t v) { put_raw(out, v); }
void put_i64(std::string& out, std::int64_t v) { put_raw(out, v); }

void put_bytes(std::string& out, std::string_view bytes) {
  put_u64(out, bytes.size());
  out.append(bytes);
}

std::string encode_request(dialect d, const request& req) {
  auto byte = byte_for(d, req.kind);
  if (!byte) {
    throw std::invalid_argument(std::string(op_name(req.kind)) +
                                " does not exist in this TCPStore dialect");
  }
  std::string out;
  put_u8(out, *byte);
  switch (body_of(req.kind)) {
    case body::nonce:
      put_u32(out, req.nonce);
      break;
    case body::key_value:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      break;
    case body::key_two_values:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      put_bytes(out, req.values.at(1));
      break;
    case body::key_number:
      put_bytes(out, req.keys.at(0));
      put_i64(out, req.number);
      break;
    case body::key:
      put_bytes(out, req.keys.at(0));
      break;
    case body::keys:
      put_u64(out, req.keys.size());
      for (const auto& k : req.keys) put_bytes(out, k);
      break;
    case body::key_value_pairs:
      if (req.keys.size() != req.values.size()) {
        throw std::invalid_argument("MULTI_SET needs as many values as keys");
      }
      put_u64(out, req.keys.size());
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        put_bytes(out, req.keys[i]);
        put_bytes(out, req.values[i]);
      }
      break;
    case body::nothing:
      break;
  }
  return out;
}

}  // namespace dtrun::rendezvous::wire
