#include "rendezvous/store/wire_codec.h"

#include <array>
#include <limits>
#include <cstring>
#include <stdexcept>

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
                            op::queue_len,   op::list_keys};

template <std::size_t n>
std::optional<std::uint8_t> find_byte(const std::array<op, n>& table, op o) {
  for (std::size_t i = 0; i < n; ++i) {
    if (table[i] == o) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

// Walks a byte buffer field by field. Every read either succeeds or leaves
// the cursor "short" (more bytes needed) or "bad" (a cap was exceeded); the
// caller checks once at the end, which keeps the per-command code linear.
class cursor {
 public:
  cursor(std::span<const std::uint8_t> in, const limits& caps, std::size_t start = 0)
      : in_(in), caps_(caps), pos_(start) {}

  bool ok() const { return !short_ && error_.empty(); }
  bool is_short() const { return short_; }
  const std::string& error() const { return error_; }
  std::size_t position() const { return pos_; }
  std::size_t wanted() const { return wanted_; }

  template <typename T>
  T value() {
    T v{};
    if (!ok()) return v;
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, in_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }

  // A u64 length followed by that many bytes, capped by `cap`.
  std::string bytes(std::uint64_t cap, const char* what) {
    auto len = skip(cap, what);
    if (!ok()) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - len), len);
  }

  // The same checks as bytes(), without copying; returns the length.
  std::uint64_t skip(std::uint64_t cap, const char* what) {
    auto len = value<std::uint64_t>();
    if (!ok()) return 0;
    if (len > cap) {
      fail(std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
           std::to_string(cap));
      return 0;
    }
    take(len);
    return len;
  }

  std::string key() { return bytes(caps_.max_key_bytes, "key"); }
  std::string payload() { return bytes(caps_.max_value_bytes, "value"); }
  void skip_key() { skip(caps_.max_key_bytes, "key"); }
  void skip_payload() { skip(caps_.max_value_bytes, "value"); }

  std::uint64_t count() {
    auto n = value<std::uint64_t>();
    if (ok() && n > caps_.max_keys) {
      fail("key count " + std::to_string(n) + " exceeds the limit of " +
           std::to_string(caps_.max_keys));
    }
    return n;
  }

  void fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }

 private:
  bool take(std::uint64_t n) {
    // Written so that no sum can wrap, whatever the caps.
    if (pos_ > caps_.max_request_bytes || n > caps_.max_request_bytes - pos_) {
      fail("request larger than the limit of " + std::to_string(caps_.max_request_bytes) +
           " bytes");
      return false;
    }
    if (in_.size() - pos_ < n) {
      short_ = true;
      wanted_ = pos_ + n;
      return false;
    }
    pos_ += n;
    return true;
  }

  std::span<const std::uint8_t> in_;
  const limits& caps_;
  std::size_t pos_ = 0;
  std::size_t wanted_ = 0;
  bool short_ = false;
  std::string error_;
};

void read_fields(op kind, cursor& c, request& r) {
  switch (kind) {
    case op::validate:
    case op::ping:
      r.nonce = c.value<std::uint32_t>();
      break;
    case op::set:
    case op::append:
    case op::queue_push:
      r.keys.push_back(c.key());
      r.values.push_back(c.payload());
      break;
    case op::compare_set:
      r.keys.push_back(c.key());
      r.values.push_back(c.payload());
      r.values.push_back(c.payload());
      break;
    case op::add:
      r.keys.push_back(c.key());
      r.number = c.value<std::int64_t>();
      break;
    case op::get:
    case op::delete_key:
    case op::watch_key:
    case op::queue_pop:
    case op::queue_len:
      r.keys.push_back(c.key());
      break;
    case op::check:
    case op::wait:
    case op::multi_get: {
      auto n = c.count();
      // Grow as bytes arrive; never reserve from an untrusted count.
      for (std::uint64_t i = 0; i < n && c.ok(); ++i) r.keys.push_back(c.key());
      break;
    }
    case op::multi_set: {
      auto n = c.count();
      for (std::uint64_t i = 0; i < n && c.ok(); ++i) {
        r.keys.push_back(c.key());
        r.values.push_back(c.payload());
      }
      break;
    }
    case op::num_keys:
    case op::cancel_wait:
    case op::list_keys:
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
  switch (req.kind) {
    case op::validate:
    case op::ping:
      put_u32(out, req.nonce);
      break;
    case op::set:
    case op::append:
    case op::queue_push:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      break;
    case op::compare_set:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      put_bytes(out, req.values.at(1));
      break;
    case op::add:
      put_bytes(out, req.keys.at(0));
      put_i64(out, req.number);
      break;
    case op::get:
    case op::delete_key:
    case op::watch_key:
    case op::queue_pop:
    case op::queue_len:
      put_bytes(out, req.keys.at(0));
      break;
    case op::check:
    case op::wait:
    case op::multi_get:
      put_u64(out, req.keys.size());
      for (const auto& k : req.keys) put_bytes(out, k);
      break;
    case op::multi_set:
      if (req.keys.size() != req.values.size()) {
        throw std::invalid_argument("MULTI_SET needs as many values as keys");
      }
      put_u64(out, req.keys.size());
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        put_bytes(out, req.keys[i]);
        put_bytes(out, req.values[i]);
      }
      break;
    case op::num_keys:
    case op::cancel_wait:
    case op::list_keys:
      break;
  }
  return out;
}

reply_shape reply_shape_of(op answered) {
  switch (answered) {
    case op::validate:
    case op::set:
    case op::append:
    case op::multi_set:
    case op::queue_push:
      return reply_shape::none;
    case op::check:
    case op::wait:
    case op::watch_key:
      return reply_shape::byte;
    case op::cancel_wait:
      return reply_shape::cancel;
    case op::add:
    case op::num_keys:
    case op::delete_key:
    case op::queue_len:
      return reply_shape::number;
    case op::ping:
      return reply_shape::nonce;
    case op::get:
    case op::compare_set:
      return reply_shape::value;
    case op::multi_get:
      return reply_shape::values;
    case op::list_keys:
      return reply_shape::counted_values;
    case op::queue_pop:
      return reply_shape::queue_item;
  }
  return reply_shape::none;
}

namespace {

// Walks one reply. With `out` null it only checks (lengths, caps, whether
// it is all there) and copies nothing; with `out` it fills it, which
// parse_reply does only once the check found the whole reply.
void read_reply_fields(reply_shape shape, cursor& c, std::size_t keys, reply* out) {
  auto value = [&](std::string* into) {
    if (into != nullptr) {
      *into = c.payload();
    } else {
      c.skip_payload();
    }
  };
  auto count = [&](const char* what) {
    auto n = c.value<std::int64_t>();
    if (c.ok() && n < 0) c.fail(std::string("negative ") + what + " " + std::to_string(n));
    if (out != nullptr) out->number = n;
    return n;
  };
  switch (shape) {
    case reply_shape::none:
      break;
    case reply_shape::byte: {
      auto b = c.value<std::uint8_t>();
      if (out != nullptr) out->byte = b;
      break;
    }
    case reply_shape::cancel: {
      auto b = c.value<std::uint8_t>();
      const bool stop_waiting_first = c.ok() && b == wait_stop_waiting;
      if (stop_waiting_first) b = c.value<std::uint8_t>();
      if (out != nullptr) {
        out->stop_waiting_first = stop_waiting_first;
        out->byte = b;
      }
      break;
    }
    case reply_shape::number: {
      auto n = c.value<std::int64_t>();
      if (out != nullptr) out->number = n;
      break;
    }
    case reply_shape::nonce: {
      auto n = c.value<std::uint32_t>();
      if (out != nullptr) out->nonce = n;
      break;
    }
    case reply_shape::value:
      value(out != nullptr ? &out->value : nullptr);
      break;
    case reply_shape::values:
      // `keys` is the caller's own request, but the check pass still grows
      // nothing: values are copied only once they have all arrived.
      if (out != nullptr) out->values.reserve(keys);
      for (std::size_t i = 0; i < keys && c.ok(); ++i) {
        value(out != nullptr ? &out->values.emplace_back() : nullptr);
      }
      break;
    case reply_shape::counted_values: {
      // The count is the server's: each value needs at least its length's
      // 8 bytes, so the loop ends with the input, and values grow one by
      // one (no reserve from it).
      auto n = count("count");
      for (std::int64_t i = 0; i < n && c.ok(); ++i) {
        value(out != nullptr ? &out->values.emplace_back() : nullptr);
      }
      break;
    }
    case reply_shape::queue_item:
      if (count("queue length") > 0 && c.ok()) value(out != nullptr ? &out->value : nullptr);
      break;
  }
}

}  // namespace

reply_parse_result parse_reply(op answered, std::span<const std::uint8_t> input,
                               std::size_t keys, std::uint64_t max_value_bytes) {
  reply_parse_result result;
  // A reply has no overall cap: each value has max_value_bytes, and
  // MULTI_GET's number of values is the caller's own.
  const limits caps{.max_key_bytes = max_value_bytes,
                    .max_value_bytes = max_value_bytes,
                    .max_keys = std::numeric_limits<std::uint64_t>::max(),
                    .max_request_bytes = std::numeric_limits<std::uint64_t>::max()};
  const auto shape = reply_shape_of(answered);
  cursor check(input, caps);
  read_reply_fields(shape, check, keys, nullptr);
  if (!check.error().empty()) {
    result.status = parse_status::bad;
    result.error = std::string(op_name(answered)) + " reply: " + check.error();
    return result;
  }
  if (check.is_short()) {
    result.bytes_wanted = check.wanted();
    return result;
  }
  cursor c(input, caps);
  result.rep.kind = answered;
  read_reply_fields(shape, c, keys, &result.rep);
  result.status = parse_status::complete;
  result.consumed = c.position();
  return result;
}

void put_byte_reply(std::string& out, std::uint8_t byte) { put_u8(out, byte); }
void put_cancel_reply(std::string& out) { put_u8(out, wait_canceled); }
void put_number_reply(std::string& out, std::int64_t number) { put_i64(out, number); }
void put_nonce_reply(std::string& out, std::uint32_t nonce) { put_u32(out, nonce); }
void put_value_reply(std::string& out, std::string_view value) { put_bytes(out, value); }

void put_values_reply(std::string& out, std::span<const std::string_view> values) {
  for (auto v : values) put_bytes(out, v);
}

void put_counted_values_reply(std::string& out, std::span<const std::string> values) {
  put_i64(out, static_cast<std::int64_t>(values.size()));
  for (const auto& v : values) put_bytes(out, v);
}

void put_queue_item_reply(std::string& out, std::int64_t length,
                          std::optional<std::string_view> value) {
  put_i64(out, length);
  if (value) put_bytes(out, *value);
}

void put_watch_event(std::string& out, std::uint8_t event, std::string_view key,
                     std::string_view old_value, std::string_view new_value) {
  put_u8(out, event);
  put_bytes(out, key);
  put_bytes(out, old_value);
  put_bytes(out, new_value);
}

}  // namespace dtrun::rendezvous::wire
