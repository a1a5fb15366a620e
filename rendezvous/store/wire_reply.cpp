// The wire codec's reply side (wire_codec.h): which shape each op's
// reply has, parsing replies, and the server's reply writers.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "rendezvous/store/wire_codec.h"
#include "rendezvous/store/wire_cursor.h"

namespace dtrun::rendezvous::wire {

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
    case op::barrier:
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
  // A fixed-size field, read into out->*field.
  auto scalar = [&]<typename T>(T reply::*field) {
    auto v = c.value<T>();
    if (out != nullptr) out->*field = v;
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
    case reply_shape::byte:
      scalar(&reply::byte);
      break;
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
    case reply_shape::number:
      scalar(&reply::number);
      break;
    case reply_shape::nonce:
      scalar(&reply::nonce);
      break;
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
