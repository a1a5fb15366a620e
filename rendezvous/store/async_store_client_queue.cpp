// async_store_client's lanes (async_store_client_impl.h): queueing,
// batches, the watch lane's WAIT giving way, timeouts.
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client_impl.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::op;
using namespace async_store_detail;

async_store_client::impl::operation async_store_client::impl::make_operation(
    const wire::request& r, store_callback done) const {
  operation o;
  o.request = encode(r);
  o.answered = r.kind;
  o.keys = r.keys.size();
  o.done = std::move(done);
  return o;
}

void async_store_client::impl::enqueue(int lane, const wire::request& r, store_callback done) {
  enqueue(lane, make_operation(r, std::move(done)));
}

void async_store_client::impl::enqueue_next(int lane, const wire::request& r, store_callback done) {
  enqueue(lane, make_operation(r, std::move(done)), true);
}

void async_store_client::impl::enqueue(int lane, operation o, bool first) {
  if (closed_) {
    asio::post(io_, [done = std::move(o.done), error = closed_error()] {
      done(store_result::failed(error));
    });
    return;
  }
  o.id = ++last_id_;
  o.lane = lane;
  if (first) {
    lanes_[lane].push_front(std::move(o));
  } else {
    lanes_[lane].push_back(std::move(o));
  }
  pump();
}

void async_store_client::impl::require(op o) const {
  if (!wire::byte_for(options_.dialect, o)) {
    throw store_error(fmt::format("{} is not supported by a PyTorch 1.13 store server",
                                  wire::op_name(o)));
  }
}

std::string async_store_client::impl::encode(const wire::request& r) const {
  require(r.kind);
  return wire::encode_request(options_.dialect, r);
}

std::vector<std::string> async_store_client::impl::keys(std::vector<std::string> ks) const {
  for (auto& k : ks) k = key(k);
  return ks;
}

void async_store_client::impl::pump() {
  if (!connected_ || closed_) return;
  if (!flight_.empty()) return suspend_watch_if_needed();
  batch_.clear();
  bool ended = take_batch(lanes_[main_queue]);
  if (!ended) take_batch(lanes_[watch_queue]);
  if (flight_.empty()) return;
  if (flight_.size() == 1) {
    // The request itself: it stays put until answered.
    return send_for_head(flight_.front().request, flight_.front().id, "sending a request");
  }
  send_for_head(batch_, flight_.front().id, "sending requests");
}

bool async_store_client::impl::take_batch(std::deque<operation>& lane) {
  while (!lane.empty() && flight_.size() < max_batch) {
    auto& o = flight_.emplace_back(std::move(lane.front()));
    lane.pop_front();
    if (o.wait_timeout && !o.deadline) {
      o.deadline = store_clock::now() + bounded(*o.wait_timeout);
    }
    batch_ += o.request;
    if (o.wait_timeout || o.alone) return true;
  }
  return false;
}

void async_store_client::impl::suspend_watch_if_needed() {
  if (flight_.size() != 1 || flight_.front().lane != watch_queue || !sent_ ||
      lanes_[main_queue].empty() || options_.dialect != wire::dialect::v2) {
    return;
  }
  auto& h = head();
  if (!h.wait_timeout || h.cancelling()) return;
  cancel_head_wait(true);
}

void async_store_client::impl::cancel_head_wait(bool suspend) {
  disarm_timer();
  auto& h = head();
  h.answered = op::cancel_wait;
  h.suspending = suspend;
  batch_ = encode({.kind = op::cancel_wait});
  if (suspend) take_batch(lanes_[main_queue]);  // after h: `h` stays valid (deque)
  send_for_head(batch_, h.id, "cancelling a wait");
}

void async_store_client::impl::send_for_head(const std::string& bytes, std::uint64_t id, const char* what) {
  sent_ = false;
  asio::async_write(socket_, asio::buffer(bytes),
                    [self = shared_from_this(), id, what](const boost::system::error_code& ec,
                                                          std::size_t) {
                      if (self->closed_) return;
                      if (ec) return self->lost(what, ec);
                      if (!self->head_is(id)) return;
                      self->sent_ = true;
                      self->arm_timer();
                      self->try_complete();
                      self->pump();  // main-lane work queued during the write
                    });
}

void async_store_client::impl::arm_timer() {
  auto& h = head();
  // What is left of a wait's deadline, after a suspension.
  auto deadline = h.wait_timeout && !h.cancelling()
                      ? *h.deadline
                      : std::chrono::steady_clock::now() + bounded(options_.timeout);
  timer_.arm_at(deadline, [self = shared_from_this(), id = h.id] { self->on_timeout(id); });
}

void async_store_client::impl::on_timeout(std::uint64_t id) {
  if (closed_ || !sent_ || !head_is(id)) return;
  disarm_timer();  // this arming is used up
  auto& h = head();
  if (h.wait_timeout && !h.cancelling() && options_.dialect == wire::dialect::v2) {
    cancel_head_wait(false);
    return;
  }
  if (h.wait_timeout && !h.suspending) {
    // 1.13 cannot cancel a wait (and a v2 server that does not answer the
    // cancel is as bad): the connection is unusable after it.
    auto error = wait_timeout_error(h);
    auto done = std::move(h.done);
    flight_.pop_front();
    close_with(std::make_exception_ptr(store_connection_error(fmt::format(
        "the connection to the store at {} was closed after a wait timed out",
        endpoint_text_))));
    done(store_result::failed(error));
    return;
  }
  close_with(std::make_exception_ptr(store_timeout(fmt::format(
      "the store at {} did not answer within {} ms", endpoint_text_, options_.timeout.count()))));
}

}  // namespace dtrun::rendezvous
