#include "rendezvous/store/async_store_client.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client_impl.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using wire::op;
using namespace async_store_detail;

std::shared_ptr<async_store_client> async_store_client::create(asio::io_context& io,
                                                               tcp_store_client_options options) {
  return std::shared_ptr<async_store_client>(
      new async_store_client(std::make_shared<impl>(io, std::move(options)), main_queue));
}

async_store_client::async_store_client(std::shared_ptr<impl> p, int lane)
    : impl_(std::move(p)), lane_(lane) {}

std::shared_ptr<async_store_client> async_store_client::watch_lane() {
  if (impl_->options_.dialect != wire::dialect::v2) {
    throw store_error("a watch lane needs CANCEL_WAIT, which a PyTorch 1.13 store server lacks");
  }
  return std::shared_ptr<async_store_client>(
      new async_store_client(impl_, watch_queue));
}

// The main lane owns the connection; a watch lane going away leaves it up.
async_store_client::~async_store_client() {
  if (lane_ == main_queue) close();
}

void async_store_client::close() {
  if (!impl_->closed_) impl_->closed_here_ = true;
  impl_->close_with(std::make_exception_ptr(
      store_closed_error(fmt::format("the client of {} was closed", impl_->endpoint_text_))));
}

void async_store_client::connect(store_callback done) {
  if (std::exchange(connect_called_, true)) {
    // Exactly one completion per call, from the loop as always.
    auto error = std::make_exception_ptr(store_connection_error(fmt::format(
        "connect() was already called for the store at {}", impl_->endpoint_text_)));
    asio::post(impl_->io_, [done = std::move(done), error] { done(store_result::failed(error)); });
    return;
  }
  impl_->connect(std::move(done));
}

void async_store_client::set(std::string key, std::string value, store_callback done) {
  impl_->enqueue(lane_, {.kind = op::set, .keys = {impl_->key(key)}, .values = {std::move(value)}},
                 std::move(done));
}

void async_store_client::add(std::string key, std::int64_t delta, store_callback done) {
  impl_->enqueue(lane_, {.kind = op::add, .keys = {impl_->key(key)}, .number = delta},
                 std::move(done));
}

void async_store_client::compare_set(std::string key, std::string expected, std::string desired,
                                     store_callback done) {
  impl_->enqueue(lane_,
                 {.kind = op::compare_set,
                  .keys = {impl_->key(key)},
                  .values = {std::move(expected), std::move(desired)}},
                 std::move(done));
}

void async_store_client::check(std::vector<std::string> keys, store_callback done) {
  impl_->enqueue(lane_, {.kind = op::check, .keys = impl_->keys(std::move(keys))}, std::move(done));
}

void async_store_client::wait(std::vector<std::string> keys, store_duration timeout,
                              store_callback done) {
  auto o = impl_->make_operation({.kind = op::wait, .keys = impl_->keys(keys)}, std::move(done));
  o.wait_timeout = timeout;
  o.wait_keys = std::move(keys);
  impl_->enqueue(lane_, std::move(o));
}

void async_store_client::get(std::string key, store_duration timeout, store_callback done) {
  // PyTorch's GET: WAIT for the key, then read it.
  auto self = shared_from_this();
  wait({key}, timeout, [self, key, done = std::move(done)](store_result waited) mutable {
    if (waited.error) return done(std::move(waited));
    self->impl_->enqueue_next(self->lane_, {.kind = op::get, .keys = {self->impl_->key(key)}},
                              std::move(done));
  });
}

void async_store_client::delete_key(std::string key, store_callback done) {
  impl_->enqueue(lane_, {.kind = op::delete_key, .keys = {impl_->key(key)}}, std::move(done));
}

void async_store_client::num_keys(store_callback done) {
  impl_->enqueue(lane_, {.kind = op::num_keys}, std::move(done));
}

void async_store_client::multi_get(std::vector<std::string> keys, store_duration timeout,
                                   store_callback done) {
  // Refused now, not when the WAIT before it is answered.
  impl_->require(op::multi_get);
  auto self = shared_from_this();
  wait(keys, timeout, [self, keys, done = std::move(done)](store_result waited) mutable {
    if (waited.error) return done(std::move(waited));
    self->impl_->enqueue_next(
        self->lane_, {.kind = op::multi_get, .keys = self->impl_->keys(std::move(keys))},
        std::move(done));
  });
}

void async_store_client::read_now(std::vector<std::string> keys, store_callback done) {
  impl_->enqueue(lane_, {.kind = op::multi_get, .keys = impl_->keys(std::move(keys))},
                 std::move(done));
}

void async_store_client::multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                                   store_callback done) {
  if (keys.size() != values.size()) {
    throw store_error("multi_set: the number of keys and values differ");
  }
  impl_->enqueue(lane_,
                 {.kind = op::multi_set,
                  .keys = impl_->keys(std::move(keys)),
                  .values = std::move(values)},
                 std::move(done));
}

void async_store_client::set_will(std::string will, std::string target, std::string value,
                                  store_callback done) {
  // The server keeps the will with this connection; its text names the
  // target by wire key, so it carries the client's key prefix.
  set(std::move(will), fmt::format("{}\n{}", impl_->key(target), value), std::move(done));
}

void async_store_client::withdraw_will(std::string will, store_callback done) {
  delete_key(std::move(will), std::move(done));
}

std::string async_store_client::local_address() const {
  boost::system::error_code ec;
  auto ep = impl_->socket_.local_endpoint(ec);
  return ec ? std::string() : ep.address().to_string();
}

}  // namespace dtrun::rendezvous
