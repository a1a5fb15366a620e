// async_store_client's connection (async_store_client_impl.h): connecting
// with retries, the hello, and failing everything when it is lost.
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client_impl.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::op;
using namespace async_store_detail;

namespace {

// The jitter of connection retries. One per thread, seeded on first use:
// a random_device per client cost 6% of a 2,048-node rendezvous (on a VM
// its CPUID probe traps), and most clients never retry.
std::mt19937& retry_rng() {
  thread_local std::mt19937 rng{std::random_device{}()};
  return rng;
}

}  // namespace

void async_store_client::impl::connect(store_callback done) {
  if (closed_ || hello_answered_) {
    // Exactly one completion per call, from the loop as always.
    auto error = closed_ ? closed_error() : hello_error_;
    asio::post(io_, [done = std::move(done), error] {
      done(store_result::failed(error));
    });
    return;
  }
  connect_done_.push_back(std::move(done));
  if (connect_started_) return;
  connect_started_ = true;
  connect_deadline_ = store_clock::now() + bounded(options_.connect_timeout);
  backoff_ = std::chrono::milliseconds(10);
  try_connect();
}

void async_store_client::impl::try_connect() {
  auto self = shared_from_this();
  // The attempt itself ends at the deadline: a host that drops SYNs (down,
  // firewalled, a full accept queue) would hold it for the kernel's
  // retries, minutes beyond connect_timeout.
  attempt_expired_ = false;
  arm_retry_timer(connect_deadline_, [this] {
    attempt_expired_ = true;
    boost::system::error_code ignored;
    resolver_.cancel();
    socket_.close(ignored);  // its handler runs with an error (or a stale success)
  });
  resolver_.async_resolve(
      options_.host, std::to_string(options_.port), tcp::resolver::numeric_service,
      [self](const boost::system::error_code& ec, tcp::resolver::results_type results) {
        if (self->closed_) return;
        if (self->attempt_expired_) return self->retry_connect("no answer");
        if (ec) {
          if (auto warn = std::exchange(self->options_.on_first_resolve_failure, nullptr)) {
            warn(ec.message());
          }
          return self->retry_connect(ec.message());
        }
        asio::async_connect(self->socket_, results,
                            [self](const boost::system::error_code& e, const tcp::endpoint&) {
                              if (self->closed_) return;
                              // Checked first: a success queued before the
                              // deadline closed the socket is no success.
                              if (self->attempt_expired_) return self->retry_connect("no answer");
                              if (e) return self->retry_connect(e.message());
                              self->on_connected();
                            });
      });
}

void async_store_client::impl::retry_connect(const std::string& why) {
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(backoff_ * jitter(retry_rng()));
  if (store_clock::now() + pause >= connect_deadline_) {
    fail_all(std::make_exception_ptr(store_timeout(fmt::format(
        "could not reach the store at {} within {} s ({}); check that the host is up, the "
        "address and port are right, and no firewall is in the way",
        endpoint_text_, options_.connect_timeout.count() / 1000.0, why))));
    return;
  }
  backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::seconds(1));
  boost::system::error_code ignored;
  socket_.close(ignored);
  arm_retry_timer(std::chrono::steady_clock::now() + pause, [this] { try_connect(); });
}

void async_store_client::impl::arm_retry_timer(std::chrono::steady_clock::time_point deadline,
                     std::function<void()> on_expiry) {
  retry_timer_.arm_at(deadline, [self = shared_from_this(), on_expiry = std::move(on_expiry)] {
    if (self->closed_ || self->connected_) return;
    on_expiry();
  });
}

void async_store_client::impl::on_connected() {
  disarm_retry_timer();  // the attempt's deadline no longer applies
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  connected_ = true;
  read_loop();
  operation hello;
  if (options_.dialect == wire::dialect::v2) {
    // VALIDATE has no reply; the PING after it proves the server speaks
    // the protocol before anything else is sent.
    auto nonce = wire::handshake_nonce(static_cast<std::uint32_t>(::getpid()));
    hello.request = wire::encode_request(options_.dialect,
                                         {.kind = op::validate, .nonce = wire::validation_magic}) +
                    wire::encode_request(options_.dialect, {.kind = op::ping, .nonce = nonce});
    hello.answered = op::ping;
    hello.nonce = nonce;
  } else {
    hello.answered = op::validate;  // nothing is sent, nothing awaited
  }
  hello.done = [this](store_result r) {
    hello_answered_ = true;  // a lane connecting later gets the same answer
    hello_error_ = r.error;
    for (auto& done : std::exchange(connect_done_, {})) done(r);
  };
  hello.id = ++last_id_;
  hello.alone = true;  // nothing else goes out before the server proved itself
  lanes_[main_queue].push_front(std::move(hello));
  pump();
}

std::exception_ptr async_store_client::impl::closed_error() const {
  auto what = fmt::format("the connection to the store at {} is closed", endpoint_text_);
  if (closed_here_) return std::make_exception_ptr(store_closed_error(what));
  return std::make_exception_ptr(store_connection_error(what));
}

void async_store_client::impl::lost(const char* what, const boost::system::error_code& ec) {
  close_with(std::make_exception_ptr(store_connection_error(fmt::format(
      "lost the connection to the store at {} while {}: {}", endpoint_text_, what,
      ec == asio::error::eof ? std::string("the server closed it") : ec.message()))));
}

void async_store_client::impl::close_with(std::exception_ptr error) {
  if (closed_) return;
  closed_ = true;
  connected_ = false;
  boost::system::error_code ignored;
  disarm_timer();
  disarm_retry_timer();
  resolver_.cancel();
  socket_.close(ignored);
  auto pending = std::move(flight_);
  flight_.clear();
  for (auto& lane : lanes_) {
    std::move(lane.begin(), lane.end(), std::back_inserter(pending));
    lane.clear();
  }
  for (auto& done : std::exchange(connect_done_, {})) done(store_result::failed(error));
  for (auto& o : pending) {
    if (o.done) o.done(store_result::failed(error));
  }
}

}  // namespace dtrun::rendezvous
