#include "rendezvous/store/store_session.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::rendezvous {

namespace {

// Small per-connection buffer so that thousands of idle clients stay cheap.
constexpr std::size_t initial_buffer_bytes = 4096;
// A read never asks for less room than this once the buffer has grown.
constexpr std::size_t read_chunk_bytes = 64 * 1024;
// Framing around the payload of the largest reply (a watch event: event
// byte and three lengths), which carries a key and two values.
constexpr std::size_t reply_framing_bytes = 64;

std::string byte_reply(std::uint8_t byte) {
  std::string out;
  wire::put_byte_reply(out, byte);
  return out;
}

}  // namespace

std::size_t session_limits::reply_cap() const {
  if (max_reply_bytes != 0) return max_reply_bytes;
  return static_cast<std::size_t>(2 * request.max_value_bytes + request.max_key_bytes) +
         reply_framing_bytes;
}

store_session::store_session(store_context& ctx, session_host& host, std::string peer)
    : ctx_(ctx), host_(host), peer_(printable(peer)) {}

store_session::~store_session() { close(); }

std::span<std::uint8_t> store_session::read_space() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (begin_ > 0 && buffer_.size() - end_ < read_chunk_bytes) {
    // Slide the unparsed tail to the front before growing.
    std::copy(buffer_.begin() + static_cast<std::ptrdiff_t>(begin_),
              buffer_.begin() + static_cast<std::ptrdiff_t>(end_), buffer_.begin());
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.empty()) {
    buffer_.resize(initial_buffer_bytes);
  } else if (buffer_.size() == end_) {
    // Full: grow by what has arrived (at least a read chunk), never by the
    // length a request announces, so a client that stalls after naming a
    // 64 MiB value costs one chunk, not 64 MiB. The announced length only
    // stops the growth from overshooting the request's end.
    std::size_t size = end_ + std::max(end_, read_chunk_bytes);
    if (wanted_ > 0 && begin_ + wanted_ > end_) size = std::min(size, begin_ + wanted_);
    buffer_.resize(size);
  } else if (end_ == 0 && buffer_.size() > 4 * read_chunk_bytes) {
    // Give back the memory a large request needed.
    buffer_.resize(initial_buffer_bytes);
    buffer_.shrink_to_fit();
  }
  return {buffer_.data() + end_, buffer_.size() - end_};
}

void store_session::received(std::size_t n) {
  end_ += n;
  // A large value arrives in many reads; parse again only once it is whole.
  if (end_ - begin_ < wanted_) return;
  process();
}

bool store_session::wants_input() const {
  return !closing_ && unsent_bytes() <= ctx_.limits.output_high_water;
}

std::string store_session::take_output() {
  in_flight_ += pending_.size();
  return std::exchange(pending_, std::string());
}

void store_session::output_sent() {
  in_flight_ = 0;
  process();  // requests held back by the high-water mark
}

void store_session::fail(const std::string& reason) {
  if (closing_) return;
  closing_ = true;
  ++ctx_.stats.connections_rejected;
  ctx_.log(fmt::format("closing connection from {}: {}", peer_, reason));
  pending_ = std::string();
  host_.close_soon();
}

void store_session::close() {
  if (closed_) return;
  closed_ = closing_ = true;
  pending_ = std::string();
  ctx_.table.cancel(waits_);
  waits_.clear();
  ctx_.table.unwatch(watch_ids_);  // ascending: ids only grow
  watch_ids_.clear();
  try {
    execute_wills();
  } catch (const std::bad_alloc&) {
    ctx_.log(fmt::format("out of memory executing the last wills of {}", peer_));
  }
  buffer_ = {};
}

// The replies to what one read brought go out in one write: reply() only
// queues them while the requests are handled.
void store_session::process() {
  struct handling_scope {
    bool& flag;
    explicit handling_scope(bool& f) : flag(f) { flag = true; }
    ~handling_scope() { flag = false; }
  };
  {
    handling_scope scope(handling_);
    handle_requests();
  }
  if (closing_ || pending_.empty()) return;
  try {
    host_.output_ready();
  } catch (const std::bad_alloc&) {
    fail("out of memory while handling its request");
  } catch (const std::length_error&) {
    fail("out of memory while handling its request");
  }
}

void store_session::handle_requests() {
  while (!closing_) {
    // A client that pipelines requests without reading the replies gets
    // no more answers until its output drains (output_sent resumes here).
    if (unsent_bytes() > ctx_.limits.output_high_water) return;
    std::span<const std::uint8_t> input(buffer_.data() + begin_, end_ - begin_);
    try {
      if (!dialect_) {
        dialect_ = wire::detect_dialect(input);
        if (!dialect_) return;
        expect_validate_ = (*dialect_ == wire::dialect::v2);
      }
      auto parsed = wire::parse_request(*dialect_, input, ctx_.limits.request, &progress_);
      if (parsed.status == wire::parse_status::bad) {
        fail(parsed.error);
        return;
      }
      if (parsed.status == wire::parse_status::need_more) {
        wanted_ = parsed.bytes_wanted;
        return;
      }
      wanted_ = 0;
      begin_ += parsed.consumed;
      ++ctx_.stats.requests;
      handle(parsed.req);
    } catch (const std::bad_alloc&) {
      // Out of memory for this one request: refuse this client, keep the
      // others (and the process) going.
      fail("out of memory while handling its request");
    } catch (const std::length_error&) {
      fail("out of memory while handling its request");
    }
  }
}

bool store_session::reply_fits(std::size_t bytes, std::string_view what) {
  if (bytes <= ctx_.limits.reply_cap()) return true;
  fail(fmt::format("{} reply of {} bytes exceeds the reply limit of {} bytes", what, bytes,
                   ctx_.limits.reply_cap()));
  return false;
}

bool store_session::reply_compare_set(const wire::request& r, std::string& out) {
  auto& table = ctx_.table;
  auto result = table.compare_set(r.keys[0], r.values[0], r.values[1]);
  if (!reply_fits(wire::value_bytes(result.size()), "COMPARE_SET")) return false;
  wire::put_value_reply(out, result);
  return true;
}

bool store_session::reply_get(const wire::request& r, std::string& out) {
  auto& table = ctx_.table;
  if (auto* v = table.find(r.keys[0])) {
    if (!reply_fits(wire::value_bytes(v->size()), "GET")) return false;
    wire::put_value_reply(out, *v);
  } else if (*dialect_ == wire::dialect::v1_13) {
    // A 1.13 client WAITs before every GET, so a missing key means it
    // is out of step: a wait it timed out on was answered late, and it
    // took that stray reply for this wait's. Dropping the connection
    // (as torch's own 1.13 server does) makes it raise instead of
    // reading an empty value as the key's.
    fail(fmt::format("GET of missing key '{}' from a 1.13 client (out of step after a "
                     "timed-out wait?)",
                     printable(r.keys[0])));
    return false;
  } else {
    // 2.x clients cancel timed-out waits; a key deleted between WAIT
    // and GET reads empty, as on PyTorch's libuv server.
    wire::put_value_reply(out, {});
  }
  return true;
}

bool store_session::reply_add(const wire::request& r, std::string& out) {
  auto& table = ctx_.table;
  auto sum = table.add(r.keys[0], r.number);
  if (!sum) {
    fail(fmt::format("ADD on key '{}': its value is not a number, or the sum overflows "
                     "64 bits",
                     printable(r.keys[0])));
    return false;
  }
  wire::put_number_reply(out, *sum);
  return true;
}

bool store_session::reply_multi_get(const wire::request& r, std::string& out) {
  auto& table = ctx_.table;
  // Size the reply before building it: a few KB naming one big value a
  // thousand times must not make the server allocate gigabytes.
  // Each key is looked up once; the second pass only copies.
  std::vector<std::string_view> values;
  values.reserve(r.keys.size());
  std::size_t total = 0;
  for (const auto& k : r.keys) {
    auto* v = table.find(k);
    values.push_back(v ? std::string_view(*v) : std::string_view());
    total += wire::value_bytes(values.back().size());
  }
  if (!reply_fits(total, "MULTI_GET")) return false;
  out.reserve(total);
  wire::put_values_reply(out, values);
  return true;
}

bool store_session::reply_list_keys(std::string& out) {
  auto keys = ctx_.table.list_keys();
  std::size_t total = wire::number_bytes;
  for (const auto& k : keys) total += wire::value_bytes(k.size());
  if (!reply_fits(total, "LIST_KEYS")) return false;
  wire::put_counted_values_reply(out, keys);
  return true;
}

void store_session::append(const wire::request& r) {
  auto& table = ctx_.table;
  // Values stay within the value cap however they are built, so a GET
  // of any stored value fits in a reply.
  auto* current = table.find(r.keys[0]);
  std::size_t total = (current ? current->size() : 0) + r.values[0].size();
  if (total > ctx_.limits.request.max_value_bytes) {
    fail(fmt::format("APPEND to key '{}' would make a value of {} bytes, over the limit "
                     "of {}",
                     printable(r.keys[0]), total, ctx_.limits.request.max_value_bytes));
    return;
  }
  table.append(r.keys[0], r.values[0]);
}

void store_session::handle(wire::request& r) {
  using wire::op;
  auto& table = ctx_.table;
  if (expect_validate_ != (r.kind == op::validate)) {
    // 2.x clients validate exactly once, first; anything else is not a
    // TCPStore client we understand.
    fail(r.kind == op::validate ? "VALIDATE sent twice" : "first command was not VALIDATE");
    return;
  }
  std::string out;
  switch (r.kind) {
    case op::validate:
      expect_validate_ = false;
      return;
    case op::ping:
      wire::put_nonce_reply(out, r.nonce);
      break;
    case op::set:
    case op::multi_set:
      set_all(r);
      return;
    case op::compare_set:
      if (!reply_compare_set(r, out)) return;
      break;
    case op::get:
      if (!reply_get(r, out)) return;
      break;
    case op::add:
      if (!reply_add(r, out)) return;
      break;
    case op::check:
      wire::put_byte_reply(out, table.check(r.keys) ? wire::check_ready : wire::check_not_ready);
      break;
    case op::wait:
      start_wait(r.keys);
      return;
    case op::barrier:
      start_barrier(r);
      return;
    case op::num_keys:
      wire::put_number_reply(out, table.size());
      break;
    case op::delete_key:
      wire::put_number_reply(out, table.erase(r.keys[0]) ? 1 : 0);
      break;
    case op::watch_key:
      start_watch(r.keys[0]);
      return;
    case op::append:
      append(r);
      return;
    case op::multi_get:
      if (!reply_multi_get(r, out)) return;
      break;
    case op::cancel_wait:
      cancel_waits(out);
      break;
    case op::queue_push:
      table.queue_push(r.keys[0], std::move(r.values[0]));
      return;
    case op::queue_pop: {
      auto [length, value] = table.queue_pop(r.keys[0]);
      wire::put_queue_item_reply(out, length, value);
      break;
    }
    case op::queue_len:
      wire::put_number_reply(out, table.queue_len(r.keys[0]));
      break;
    case op::list_keys:
      if (!reply_list_keys(out)) return;
      break;
  }
  reply(std::move(out));
}

// SET (one key) and MULTI_SET: no reply.
void store_session::set_all(wire::request& r) {
  for (std::size_t i = 0; i < r.keys.size(); ++i) {
    remember_will(r.keys[i], r.values[i]);
    ctx_.table.set(r.keys[i], std::move(r.values[i]));
  }
}

void store_session::cancel_waits(std::string& out) {
  ctx_.table.cancel(waits_);
  waits_.clear();
  waits_kept_ = 0;
  wire::put_cancel_reply(out);
}

void store_session::reply(std::string bytes) {
  if (closing_) return;
  if (pending_.empty()) {
    pending_ = std::move(bytes);
  } else {
    pending_.append(bytes);
  }
  if (!handling_) host_.output_ready();  // a wait answered on another's request
}

bool store_session::event_fits(std::size_t bytes) {
  if (closing_) return false;
  // The same rule as for its own replies (process() answers only below the
  // high-water mark), so unsent output stays under output_cap(). Events
  // are pushed by other clients' writes, so back-pressure (not reading this
  // client) cannot hold them back; a client that lets them pile up is
  // dropped instead.
  if (unsent_bytes() <= ctx_.limits.output_high_water) return true;
  fail(fmt::format("it is not reading: {} bytes of replies and events unsent, over the "
                   "limit of {}",
                   unsent_bytes() + bytes, ctx_.limits.output_high_water));
  return false;
}

void store_session::start_wait(const std::vector<std::string>& keys) {
  // `this` stays valid for the callback: close() cancels every wait.
  auto handle = ctx_.table.wait(keys, [this] { on_wait_ready(); });
  if (!handle) {
    reply(byte_reply(wire::wait_stop_waiting));
    return;
  }
  keep_wait(std::move(handle));
}

void store_session::start_barrier(const wire::request& r) {
  // `this` stays valid for the callback, as for a WAIT's.
  auto handle = ctx_.table.barrier(r.keys[0], r.number, [this] { on_wait_ready(); });
  if (!handle) {
    // Both PyTorch servers close the connection here too (std::stoll throws).
    fail(fmt::format("BARRIER on key '{}': its value is not a number, or the count "
                     "overflows 64 bits",
                     printable(r.keys[0])));
    return;
  }
  if (!*handle) {
    reply(byte_reply(wire::wait_stop_waiting));
    return;
  }
  keep_wait(std::move(*handle));
}

void store_session::keep_wait(wait_handle handle) {
  // Finished waits are dropped here, once the list has doubled since the
  // last pass: dropping them as each fires costs waits squared when one
  // MULTI_SET wakes many waits of one connection.
  if (waits_.size() >= 2 * waits_kept_ + 16) {
    std::erase_if(waits_, [](const wait_handle& w) { return w->remaining == 0; });
    waits_kept_ = waits_.size();
  }
  waits_.push_back(std::move(handle));
}

void store_session::on_wait_ready() {
  if (!event_fits(1)) return;
  try {
    reply(byte_reply(wire::wait_stop_waiting));
  } catch (const std::bad_alloc&) {
    fail("out of memory while answering its WAIT");
  }
}

void store_session::start_watch(const std::string& key) {
  // Every watch is remembered, so close() removes them all: the key_table
  // must never call back into a closed session.
  watch_ids_.push_back(ctx_.table.watch(
      key, [this](std::uint8_t event, const std::string& k, std::string_view old_value,
                  std::string_view new_value) { on_watch_event(event, k, old_value, new_value); }));
  reply(byte_reply(wire::watch_callback_registered));
}

void store_session::on_watch_event(std::uint8_t event, const std::string& key,
                                   std::string_view old_value, std::string_view new_value) {
  if (closing_) return;
  std::size_t size = wire::watch_event_bytes(key.size(), old_value.size(), new_value.size());
  if (size > ctx_.limits.reply_cap()) {
    fail(fmt::format("a watch event of {} bytes for key '{}' exceeds the reply limit of {} "
                     "bytes",
                     size, printable(key), ctx_.limits.reply_cap()));
    return;
  }
  if (!event_fits(size)) return;
  try {
    std::string out;
    out.reserve(size);
    wire::put_watch_event(out, event, key, old_value, new_value);
    reply(std::move(out));
  } catch (const std::bad_alloc&) {
    fail("out of memory while sending it a watch event");
  }
}

// A "last will" (see will_key_prefix): remembered per connection, executed
// when the connection closes while the will key still holds it.
void store_session::remember_will(const std::string& key, const std::string& value) {
  if (!key.starts_with(will_key_prefix)) return;
  auto newline = value.find('\n');
  if (newline == std::string::npos || newline == 0) return;  // not a will: stored as is
  wills_.insert_or_assign(key, value);
}

void store_session::execute_wills() {
  auto& table = ctx_.table;
  for (const auto& [key, will] : wills_) {
    const std::string* current = table.find(key);
    if (current == nullptr || *current != will) continue;  // withdrawn or replaced
    auto newline = will.find('\n');
    table.erase(key);
    // The first reason wins (as dynamic_rendezvous's end_round_first): a
    // will must not overwrite what its target already says. A node whose
    // worker failed sets `over` to that failure, then reconnects for the
    // next round with its will still standing; executed as a plain SET the
    // will turned the reason the others read into "node N was lost" (found
    // by scripts/chaos, seed 5).
    auto target = will.substr(0, newline);
    if (const std::string* now = table.find(target); now != nullptr && !now->empty()) continue;
    table.set(target, will.substr(newline + 1));
  }
  wills_.clear();
}

}  // namespace dtrun::rendezvous
