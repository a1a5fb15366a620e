// PyTorch's TCPStore wire protocol as pure functions: no sockets, no
// allocation sized by untrusted input, testable byte by byte and fuzzable.
//
// Framing (as PyTorch's c10d TCPStore.cpp writes it): a request is one command
// byte and its fields; integers are little-endian; strings are a u64 length
// and raw bytes. There is no frame length, so the parser walks the fields
// and answers complete / need more / bad.
//
// A reply has no command byte and no frame length either: its shape
// follows from the op it answers (reply_shape_of), and parse_reply walks it
// the same way. Every op's reply bytes, both ways, are defined here and
// listed in docs/store.md ("Replies").
//
// Two dialects share the server. PyTorch 2.x opens every connection with
// VALIDATE (00 CE F7 85 3C) and numbers commands from VALIDATE=0; Debian's
// torch 1.13 sends no handshake and numbers them from SET=0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::rendezvous::wire {

enum class dialect : std::uint8_t { v1_13, v2 };

// Every operation either dialect knows, independent of its byte value.
enum class op : std::uint8_t {
  validate,
  set,
  compare_set,
  get,
  add,
  check,
  wait,
  num_keys,
  watch_key,  // 1.13 only
  delete_key,
  append,
  multi_get,
  multi_set,
  cancel_wait,
  ping,
  queue_push,
  queue_pop,
  queue_len,
  list_keys,
  barrier,  // 2.x, torch 2.15 (2.6 lacks it): count an arrival, wait for the rest
};

std::string_view op_name(op o);

// The op a command byte means in `d`, or nullopt when `d` has no such byte.
std::optional<op> op_from_byte(dialect d, std::uint8_t byte);
// The byte for `o` in `d`, or nullopt when `d` lacks `o`.
std::optional<std::uint8_t> byte_for(dialect d, op o);

inline constexpr std::uint32_t validation_magic = 0x3C85F7CE;

// The PING nonce a 2.x client sends right after VALIDATE, from any seed
// (PyTorch uses its pid). A torch 1.13 server reads VALIDATE + PING as a
// SET whose 8-byte key length ends with the nonce's third byte; with that
// byte's top bit set the length is at least 2^63, over std::vector's
// max_size(), so 1.13 drops the connection before allocating anything. A
// pid there asks it for a terabyte or more, which a host with overcommit
// may try to grant.
constexpr std::uint32_t handshake_nonce(std::uint32_t seed) {
  return (seed & 0xFF00FFFFu) | 0x00800000u;
}

// Reply bytes.
inline constexpr std::uint8_t check_ready = 0;
inline constexpr std::uint8_t check_not_ready = 1;
inline constexpr std::uint8_t wait_stop_waiting = 0;
inline constexpr std::uint8_t wait_canceled = 1;
// 1.13 watch events.
inline constexpr std::uint8_t watch_key_updated = 0;
inline constexpr std::uint8_t watch_key_created = 1;
inline constexpr std::uint8_t watch_key_deleted = 2;
inline constexpr std::uint8_t watch_callback_registered = 3;

// What one request may carry. A request over any cap is rejected as bad
// before its bytes are buffered.
struct limits {
  std::uint64_t max_key_bytes = 64 * 1024;
  std::uint64_t max_value_bytes = 64ull * 1024 * 1024;
  std::uint64_t max_keys = 1 << 20;                         // check/wait/multi_*
  std::uint64_t max_request_bytes = 256ull * 1024 * 1024;  // all fields together
};

// One decoded request. Which fields are used depends on `kind`:
//   set, append, queue_push: keys[0], values[0]
//   compare_set: keys[0], values[0] = expected, values[1] = desired
//   add: keys[0], number = delta
//   barrier: keys[0], number = world size (the count that releases it)
//   get, delete_key, watch_key, queue_pop, queue_len: keys[0]
//   check, wait, multi_get: keys
//   multi_set: keys[i], values[i]
//   validate, ping: nonce (magic / ping nonce)
//   num_keys, cancel_wait, list_keys: nothing
struct request {
  op kind = op::ping;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t number = 0;
  std::uint32_t nonce = 0;
};

enum class parse_status : std::uint8_t { complete, need_more, bad };

struct parse_result {
  parse_status status = parse_status::need_more;
  std::size_t consumed = 0;  // bytes of `input` the request used (complete only)
  // need_more: the buffer must hold at least this many bytes before parsing
  // again is worth it (lets a reader wait for a large value in one go).
  std::size_t bytes_wanted = 0;
  request req;
  std::string error;  // bad: what was wrong, for the log line
};

// How far an incomplete multi-key request (CHECK, WAIT, MULTI_GET,
// MULTI_SET) has been checked: its items are walked once as they arrive, so
// a request of a million small keys arriving in many reads costs linear
// time, not a full re-parse per read. Keep one per connection; reset (or
// default-construct) it when the input no longer starts with the same
// request. parse_request resets it when it returns complete or bad.
struct parse_progress {
  std::size_t position = 0;      // bytes checked, at an item boundary (0: none)
  std::uint64_t items_left = 0;  // items not yet checked after `position`
};

// Parses one request from the front of `input`. With `progress`, a short
// multi-key request resumes its check where the previous call stopped and
// is built only once it is whole.
parse_result parse_request(dialect d, std::span<const std::uint8_t> input,
                           const limits& caps = {}, parse_progress* progress = nullptr);

// Decides a connection's dialect from its first bytes: v2 when they are
// exactly VALIDATE + magic, v1_13 as soon as they cannot be; nullopt while
// too few bytes have arrived to tell.
std::optional<dialect> detect_dialect(std::span<const std::uint8_t> first_bytes);

// Encoding, used by the client for requests and by the server for replies.
// All append to `out`.
void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_u64(std::string& out, std::uint64_t v);
void put_i64(std::string& out, std::int64_t v);
void put_bytes(std::string& out, std::string_view bytes);  // u64 length + bytes

// The full request for `req` in `d`. Throws std::invalid_argument when `d`
// has no byte for req.kind.
std::string encode_request(dialect d, const request& req);

// --- replies -------------------------------------------------------------

// What the server sends back for one request, by the op it answers. The
// same in both dialects (an op's byte differs, its reply does not).
enum class reply_shape : std::uint8_t {
  none,            // VALIDATE, SET, APPEND, MULTI_SET, QUEUE_PUSH
  byte,            // CHECK (check_*), WAIT and BARRIER (wait_stop_waiting,
                   // once released), WATCH_KEY
                   // (watch_callback_registered; the events that follow
                   // are not replies and are not parsed here)
  cancel,          // CANCEL_WAIT: wait_canceled, after a wait_stop_waiting
                   // when the cancelled WAIT's keys came first
  number,          // ADD (the sum), GETNUMKEYS, DELETE_KEY (keys erased),
                   // QUEUE_LEN: i64
  nonce,           // PING: the u32 nonce echoed
  value,           // GET, COMPARE_SET: one value (u64 length + bytes)
  values,          // MULTI_GET: one value per key of the request
  counted_values,  // LIST_KEYS: i64 count, then that many values
  queue_item,      // QUEUE_POP: i64 queue length before the pop, then the
                   // popped value when that length is above 0
};

reply_shape reply_shape_of(op answered);

// One decoded reply. Which fields are set depends on the shape:
//   byte: byte
//   cancel: byte (the last one), stop_waiting_first
//   number: number
//   nonce: nonce
//   value: value
//   values, counted_values: values (number = the count for counted_values)
//   queue_item: number = the length before the pop; value when it was > 0
struct reply {
  op kind = op::ping;  // the op answered
  std::uint8_t byte = 0;
  // CANCEL_WAIT only: the WAIT it cancels was answered (wait_stop_waiting)
  // before the cancel reached the server, so it had not timed out after all.
  bool stop_waiting_first = false;
  std::int64_t number = 0;
  std::uint32_t nonce = 0;
  std::string value;
  std::vector<std::string> values;
};

struct reply_parse_result {
  parse_status status = parse_status::need_more;
  std::size_t consumed = 0;      // bytes of `input` the reply used (complete only)
  std::size_t bytes_wanted = 0;  // need_more: as for parse_result
  reply rep;
  std::string error;  // bad: what was wrong, e.g. "GET reply: value of ..."
};

// Parses the reply to `answered` from the front of `input` (bytes that
// follow it are left alone: `consumed` stops at its end). `keys` is the
// request's number of keys, which MULTI_GET's reply has as many values
// as; other ops ignore it. A value longer than `max_value_bytes` is bad
// as soon as its length has arrived, as is a negative count or queue
// length. Nothing is allocated until the whole reply is there, and never
// by a length from the wire; need_more keeps no state, so a caller parses
// the reply again, from its first byte, once bytes_wanted have arrived.
// A reply of shape none is complete at once with consumed 0.
reply_parse_result parse_reply(op answered, std::span<const std::uint8_t> input,
                               std::size_t keys, std::uint64_t max_value_bytes);

// Encoding of the server's replies, one function per shape; all append to
// `out`. The op each serves is listed at reply_shape.
void put_byte_reply(std::string& out, std::uint8_t byte);
// CANCEL_WAIT's own reply (the STOP_WAITING before it, if any, is the
// cancelled WAIT's, written with put_byte_reply when its keys came).
void put_cancel_reply(std::string& out);
void put_number_reply(std::string& out, std::int64_t number);
void put_nonce_reply(std::string& out, std::uint32_t nonce);
void put_value_reply(std::string& out, std::string_view value);
void put_values_reply(std::string& out, std::span<const std::string_view> values);
void put_counted_values_reply(std::string& out, std::span<const std::string> values);
// `value` is the popped item, which the caller passes exactly when
// `length` (the queue's before the pop) is above 0: parse_reply reads a
// value after a positive length only.
void put_queue_item_reply(std::string& out, std::int64_t length,
                          std::optional<std::string_view> value);
// A 1.13 watch event (not a reply: sent whenever a watched key changes):
// u8 event (watch_key_*), then key, old value and new value as values.
void put_watch_event(std::string& out, std::uint8_t event, std::string_view key,
                     std::string_view old_value, std::string_view new_value);

// Sizes, for checking a reply against a cap before building it.
inline constexpr std::size_t number_bytes = 8;
constexpr std::size_t value_bytes(std::size_t length) { return 8 + length; }
constexpr std::size_t watch_event_bytes(std::size_t key, std::size_t old_value,
                                        std::size_t new_value) {
  return 1 + value_bytes(key) + value_bytes(old_value) + value_bytes(new_value);
}

}  // namespace dtrun::rendezvous::wire
