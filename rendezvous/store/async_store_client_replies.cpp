// async_store_client's replies (async_store_client_impl.h): reading them
// and completing the operations in flight.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client_impl.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::op;
using namespace async_store_detail;

store_result async_store_client::impl::to_result(const operation& o, wire::reply r) {
  store_result result;
  switch (o.answered) {
    case op::ping:  // the hello
      if (r.nonce != o.nonce) {
        result.fail(std::make_exception_ptr(
            store_connection_error("the server did not echo the ping; is it a TCPStore?")));
      }
      break;
    case op::wait:
      if (r.byte != wire::wait_stop_waiting) {
        result.fail(std::make_exception_ptr(
            store_corrupt_reply(fmt::format("unexpected reply {} to WAIT", r.byte))));
      }
      break;
    case op::check:
      result.flag = r.byte == wire::check_ready;
      break;
    case op::delete_key:
      result.flag = r.number == 1;
      break;
    case op::add:
    case op::num_keys:
      result.number = r.number;
      break;
    case op::get:
    case op::compare_set:
      result.value = std::move(r.value);
      break;
    case op::multi_get:
      result.values = std::move(r.values);
      break;
    default:  // no reply (SET, MULTI_SET, a 1.13 hello), or not used here
      break;
  }
  return result;
}

std::exception_ptr async_store_client::impl::wait_timeout_error(const operation& o) const {
  return std::make_exception_ptr(store_wait_timeout(
      fmt::format("timed out after {} ms waiting for key(s) {} in the store at {}",
                  o.wait_timeout->count(), quoted_keys(o.wait_keys), endpoint_text_)));
}

void async_store_client::impl::read_loop() {
  // Consumed bytes are dropped here, where no read is outstanding: the
  // read in progress writes at buffer_ + end_, so resetting end_ under it
  // (as try_complete did when a write's completion consumed the last
  // reply) made the next reply land after a stale byte, which was then
  // read as the reply (a WAIT "answered" by an old WAIT_CANCELED).
  if (begin_ == end_) begin_ = end_ = 0;
  // Start small (thousands of agents each hold clients) and double as
  // large replies need it.
  if (buffer_.size() - end_ < 1024) buffer_.resize(std::max<std::size_t>(4096, 2 * buffer_.size()));
  socket_.async_read_some(
      asio::buffer(buffer_.data() + end_, buffer_.size() - end_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (self->closed_) return;
        if (ec) return self->lost("reading a reply", ec);
        self->end_ += n;
        self->try_complete();
        if (!self->closed_) self->read_loop();
      });
}

void async_store_client::impl::try_complete() {
  while (sent_ && !flight_.empty() && !closed_) {
    auto& h = head();
    // Parsed again from its first byte on every read; a value is copied
    // only once it has all arrived, so a large one costs no more.
    auto parsed = wire::parse_reply(
        h.answered, std::span<const std::uint8_t>(buffer_.data() + begin_, end_ - begin_),
        h.keys, options_.max_value_bytes);
    if (parsed.status == wire::parse_status::need_more) break;
    if (parsed.status == wire::parse_status::bad) {
      close_with(std::make_exception_ptr(store_corrupt_reply(
          fmt::format("the store at {} sent a bad {}", endpoint_text_, parsed.error))));
      return;
    }
    begin_ += parsed.consumed;
    disarm_timer();
    store_result result;
    if (h.cancelling()) {
      // Cancelled before its keys came, or (STOP_WAITING first) they came
      // just in time: a success.
      const bool cancelled = !parsed.rep.stop_waiting_first;
      // A deadline that passed while suspended is a timeout: under steady
      // main-lane traffic the timer never gets to say so.
      if (cancelled && h.suspending && store_clock::now() < *h.deadline) {
        // Suspended, not over: back to being an unsent WAIT, first in
        // its lane (what is in flight behind it is the main lane's).
        h.answered = op::wait;
        h.suspending = false;
        lanes_[watch_queue].push_front(std::move(h));
        flight_.pop_front();
        if (!flight_.empty()) arm_timer();
        pump();
        continue;
      }
      if (cancelled) result.fail(wait_timeout_error(h));
    } else {
      result = to_result(h, std::move(parsed.rep));
    }
    auto done = std::move(h.done);
    flight_.pop_front();
    if (!flight_.empty()) arm_timer();  // the next of the batch
    done(std::move(result));
    pump();
  }
  if (flight_.empty() && begin_ != end_ && !closed_) {
    close_with(std::make_exception_ptr(
        store_corrupt_reply(
            fmt::format("the store at {} sent bytes nobody asked for", endpoint_text_))));
    return;
  }
}

}  // namespace dtrun::rendezvous
