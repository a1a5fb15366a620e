#include "rendezvous/store/tcp_store_client.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <span>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::op;

// Blocking calls are asynchronous operations on a private io_context run
// until a deadline: one mechanism gives every call its timeout.
namespace {

// now + d without overflowing the clock, whatever the caller passed:
// negative is now, beyond no_timeout is no_timeout.
store_clock::time_point deadline_after(store_duration d) {
  return store_clock::now() + std::clamp(d, store_duration::zero(), no_timeout);
}

}  // namespace

class tcp_store_client::impl {
 public:
  explicit impl(tcp_store_client_options options)
      : options_(std::move(options)), endpoint_text_(fmt::format("{}:{}", options_.host,
                                                                 options_.port)) {}

  // --- connection -------------------------------------------------------

  void connect() {
    const auto deadline = deadline_after(options_.connect_timeout);
    std::mt19937 rng(std::random_device{}());
    auto backoff = std::chrono::milliseconds(10);
    std::string last_error;
    while (true) {
      try {
        connect_once(deadline);
        return;
      } catch (const store_error& e) {  // refused, unreachable, timed out
        if (handshake_rejected_) throw;
        last_error = e.what();
      }
      // Exponential backoff with jitter, so a thousand agents started at
      // once do not knock on the store in lockstep.
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(backoff * jitter(rng));
      if (store_clock::now() + pause >= deadline) {
        if (silent_server_) {
          throw store_timeout(fmt::format(
              "the server at {} took the connection but did not answer the PyTorch 2.x "
              "handshake within {} s; check that the address and port are a TCPStore's",
              endpoint_text_, options_.connect_timeout.count() / 1000.0));
        }
        throw store_timeout(fmt::format(
            "could not reach the store at {} within {} s ({}); check that the host is up, "
            "the address and port are right, and no firewall is in the way",
            endpoint_text_, options_.connect_timeout.count() / 1000.0, last_error));
      }
      asio::steady_timer timer(io_, pause);
      run([&](auto done) { timer.async_wait([done](auto ec) { done(ec, 0); }); }, deadline,
          "backoff");
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
    }
  }

  void connect_once(store_clock::time_point deadline) {
    open_socket(deadline);
    if (dialect_ == wire::dialect::v1_13) return;
    // The handshake a 2.x server insists on, then a ping to prove it is a
    // store that answers. Safe to send to a 1.13 server (handshake_nonce).
    wire::request validate{.kind = op::validate, .nonce = wire::validation_magic};
    send(wire::encode_request(wire::dialect::v2, validate), deadline);
    bool answered = false;
    try {
      answered = ping_until(deadline);
    } catch (const store_timeout&) {
      // Connected, but nothing came back: a server that is not a store
      // (or one too busy to answer), not an unreachable host.
      close();
      silent_server_ = true;
      throw;
    } catch (const store_connection_error&) {
      // Closed on the handshake: a 1.13 server, or a dtrun store that
      // refuses us. Retrying would not help.
      if (detecting_ && speaks_v1_13(deadline)) return;
      handshake_rejected_ = true;
      throw store_connection_error(
          detecting_
              ? "the server closed the connection after the PyTorch 2.x handshake and after a "
                "PyTorch 1.13 request; if it is a dtrun store, its log says why it refused this "
                "client (same-user rule, allowed networks)"
              : "the server closed the connection after the PyTorch 2.x handshake; if it is a "
                "PyTorch 1.13 TCPStore, use the 1.13 dialect (dtrun-store --dialect v1.13 or "
                "auto); if it is a dtrun store, its log says why it refused this client "
                "(same-user rule, allowed networks)");
    }
    if (!answered) {
      // Something answered, but not a store (an echo, HTTP, garbage): it
      // will not become one, so this is final rather than retried until
      // the connect timeout.
      close();
      handshake_rejected_ = true;
      throw store_connection_error(fmt::format(
          "the server at {} answered the PyTorch 2.x ping with other bytes: it is not a "
          "TCPStore (nor dtrun's store); check the address and port",
          endpoint_text_));
    }
    detecting_ = false;  // a 2.x server (PyTorch 2.x or dtrun)
  }

  // Dialect detection, after the server closed the connection on the 2.x
  // handshake: a fresh connection and 1.13's GETNUMKEYS (read-only, no
  // arguments). Answered: a 1.13 server, and this connection is ours.
  bool speaks_v1_13(store_clock::time_point deadline) {
    try {
      open_socket(deadline);
      send(wire::encode_request(wire::dialect::v1_13, {.kind = op::num_keys}), deadline);
      read_reply(op::num_keys, deadline);
    } catch (const store_connection_error&) {
      return false;
    }
    dialect_ = wire::dialect::v1_13;
    detecting_ = false;
    return true;
  }

  void open_socket(store_clock::time_point deadline) {
    close();
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                      tcp::resolver::numeric_service, ec);
    if (ec) throw store_connection_error(fmt::format("cannot resolve: {}", ec.message()));
    socket_ = tcp::socket(io_);
    run([&](auto done) {
          asio::async_connect(socket_, endpoints,
                              [done](auto e, const tcp::endpoint&) { done(e, 0); });
        },
        deadline, "connect");
    socket_.set_option(tcp::no_delay(true), ec);
    connected_ = true;
    read_pos_ = read_end_ = 0;
  }

  void ensure_connected() {
    if (!connected_) connect();
  }

  void close() {
    boost::system::error_code ignored;
    if (socket_.is_open()) socket_.close(ignored);
    connected_ = false;
  }

  bool ping_until(store_clock::time_point deadline) {
    auto nonce = wire::handshake_nonce(static_cast<std::uint32_t>(::getpid()));
    send(wire::encode_request(wire::dialect::v2, {.kind = op::ping, .nonce = nonce}), deadline);
    return read_reply(op::ping, deadline).nonce == nonce;
  }

  // --- requests ---------------------------------------------------------

  // Sends one request; `what` names it in errors.
  void request(const wire::request& r) {
    ensure_connected();
    send(encode(r), reply_deadline());
  }

  std::string encode(const wire::request& r) const {
    if (!wire::byte_for(dialect_, r.kind)) {
      throw store_error(fmt::format("{} is not supported by a PyTorch 1.13 store server; "
                                    "use dtrun's store or PyTorch 2.x",
                                    wire::op_name(r.kind)));
    }
    return wire::encode_request(dialect_, r);
  }

  store_clock::time_point reply_deadline() const { return deadline_after(options_.timeout); }

  std::string key(std::string_view k) const { return options_.key_prefix + std::string(k); }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const {
    std::vector<std::string> out;
    out.reserve(ks.size());
    for (const auto& k : ks) out.push_back(key(k));
    return out;
  }

  void wait(const std::vector<std::string>& user_keys, store_duration timeout) {
    request({.kind = op::wait, .keys = keys(user_keys)});
    auto deadline = deadline_after(timeout);
    std::uint8_t reply = 0;
    try {
      // A one-byte reply cannot be half-read, so a timeout leaves the
      // connection in a known state.
      keep_connection_on_timeout_ = true;
      reply = read_reply(op::wait, deadline).byte;
      keep_connection_on_timeout_ = false;
    } catch (const store_timeout&) {
      keep_connection_on_timeout_ = false;
      abandon_wait();
      throw store_wait_timeout(fmt::format(
          "timed out after {} ms waiting for key(s) {} in the store at {}", timeout.count(),
          quoted_keys(user_keys), endpoint_text_));
    }
    if (reply != wire::wait_stop_waiting) {
      close();
      throw store_error(fmt::format("unexpected reply {} to WAIT from {}", reply, endpoint_text_));
    }
  }

  // After a wait timed out the server may still answer it later. 2.x can
  // cancel the wait and keep the connection; 1.13 cannot, so we reconnect
  // on the next call instead of reading a stray reply as the next answer.
  void abandon_wait() {
    if (dialect_ == wire::dialect::v1_13) {
      close();
      return;
    }
    send(encode({.kind = op::cancel_wait}), reply_deadline());
    // WAIT_CANCELED, after the wait's STOP_WAITING if its keys came first.
    if (read_reply(op::cancel_wait, reply_deadline()).byte != wire::wait_canceled) close();
  }

  // --- I/O primitives ---------------------------------------------------

  template <typename Start>
  void run(Start&& start, store_clock::time_point deadline, const char* what) {
    bool done = false;
    boost::system::error_code result;
    io_.restart();
    start([&](const boost::system::error_code& ec, std::size_t) {
      done = true;
      result = ec;
    });
    io_.run_until(deadline);
    if (!done) {
      // Abort the operation and let its handler run before we return, so
      // nothing refers to our stack afterwards. It may still complete.
      boost::system::error_code ignored;
      socket_.cancel(ignored);
      io_.restart();
      io_.run();
      if (!done || result == asio::error::operation_aborted) {
        // A half-read reply would poison the next call: drop the
        // connection, unless the caller knows how to resynchronise.
        if (!keep_connection_on_timeout_) close();
        throw store_timeout(fmt::format("{} to the store at {} timed out", what, endpoint_text_));
      }
    }
    if (result) {
      close();
      throw store_connection_error(fmt::format("{} to the store at {} failed: {}", what,
                                               endpoint_text_, result.message()));
    }
  }

  void send(const std::string& bytes, store_clock::time_point deadline) {
    run([&](auto done) { asio::async_write(socket_, asio::buffer(bytes), done); }, deadline,
        "sending");
  }

  // Makes at least n unread bytes available in read_buffer_.
  void fill(std::size_t n, store_clock::time_point deadline) {
    if (read_end_ - read_pos_ >= n) return;
    if (read_pos_ > 0) {
      std::copy(read_buffer_.begin() + read_pos_, read_buffer_.begin() + read_end_,
                read_buffer_.begin());
      read_end_ -= read_pos_;
      read_pos_ = 0;
    }
    if (read_buffer_.size() < std::max<std::size_t>(n, 64 * 1024)) {
      read_buffer_.resize(std::max<std::size_t>(n, 64 * 1024));
    }
    while (read_end_ < n) {
      std::size_t got = 0;
      run([&](auto done) {
            socket_.async_read_some(asio::buffer(read_buffer_.data() + read_end_,
                                                 read_buffer_.size() - read_end_),
                                    [&got, done](auto ec, std::size_t k) {
                                      got = k;
                                      done(ec, k);
                                    });
          },
          deadline, "reading a reply");
      read_end_ += got;
    }
  }

  // Reads the reply to `answered` (wire::parse_reply; `keys`: the
  // request's, for MULTI_GET), waiting for as many bytes as it still needs
  // in one go. A reply it cannot read (a value over max_value_bytes) closes
  // the connection: the next bytes would not be a reply's start.
  wire::reply read_reply(op answered, store_clock::time_point deadline, std::size_t keys = 0) {
    while (true) {
      std::span<const std::uint8_t> unread(read_buffer_.data() + read_pos_,
                                           read_end_ - read_pos_);
      auto parsed = wire::parse_reply(answered, unread, keys, options_.max_value_bytes);
      switch (parsed.status) {
        case wire::parse_status::complete:
          read_pos_ += parsed.consumed;
          return std::move(parsed.rep);
        case wire::parse_status::bad:
          close();
          throw store_error(fmt::format("the store at {} sent a bad {}", endpoint_text_,
                                        parsed.error));
        case wire::parse_status::need_more:
          fill(parsed.bytes_wanted, deadline);
          break;
      }
    }
  }

  tcp_store_client_options options_;
  std::string endpoint_text_;
  asio::io_context io_;
  tcp::socket socket_{io_};
  bool connected_ = false;
  bool keep_connection_on_timeout_ = false;
  // The server refused the handshake or is not a store: final, not retried.
  bool handshake_rejected_ = false;
  // A connection was taken but the handshake was never answered.
  bool silent_server_ = false;
  // The dialect spoken; while detecting_, found by the first connection.
  wire::dialect dialect_ = options_.dialect;
  bool detecting_ = options_.detect_dialect;
  std::vector<std::uint8_t> read_buffer_;
  std::size_t read_pos_ = 0, read_end_ = 0;
};

tcp_store_client::tcp_store_client(tcp_store_client_options options)
    : impl_(std::make_unique<impl>(std::move(options))) {
  set_timeout(impl_->options_.timeout);
  impl_->connect();
}

tcp_store_client::~tcp_store_client() = default;

void tcp_store_client::set(std::string_view key, std::string_view value) {
  impl_->request({.kind = op::set, .keys = {impl_->key(key)}, .values = {std::string(value)}});
}

std::string tcp_store_client::get(std::string_view key) {
  impl_->wait({std::string(key)}, timeout());
  impl_->request({.kind = op::get, .keys = {impl_->key(key)}});
  return impl_->read_reply(op::get, impl_->reply_deadline()).value;
}

std::int64_t tcp_store_client::add(std::string_view key, std::int64_t delta) {
  impl_->request({.kind = op::add, .keys = {impl_->key(key)}, .number = delta});
  return impl_->read_reply(op::add, impl_->reply_deadline()).number;
}

std::string tcp_store_client::compare_set(std::string_view key, std::string_view expected,
                                          std::string_view desired) {
  impl_->request({.kind = op::compare_set,
                  .keys = {impl_->key(key)},
                  .values = {std::string(expected), std::string(desired)}});
  return impl_->read_reply(op::compare_set, impl_->reply_deadline()).value;
}

bool tcp_store_client::check(const std::vector<std::string>& keys) {
  impl_->request({.kind = op::check, .keys = impl_->keys(keys)});
  return impl_->read_reply(op::check, impl_->reply_deadline()).byte == wire::check_ready;
}

void tcp_store_client::wait(const std::vector<std::string>& keys, store_duration timeout) {
  impl_->wait(keys, timeout);
}

bool tcp_store_client::delete_key(std::string_view key) {
  impl_->request({.kind = op::delete_key, .keys = {impl_->key(key)}});
  return impl_->read_reply(op::delete_key, impl_->reply_deadline()).number == 1;
}

std::int64_t tcp_store_client::num_keys() {
  impl_->request({.kind = op::num_keys});
  return impl_->read_reply(op::num_keys, impl_->reply_deadline()).number;
}

void tcp_store_client::append(std::string_view key, std::string_view value) {
  impl_->request({.kind = op::append, .keys = {impl_->key(key)}, .values = {std::string(value)}});
}

std::vector<std::string> tcp_store_client::multi_get(const std::vector<std::string>& keys) {
  impl_->wait(keys, timeout());
  if (impl_->dialect_ == wire::dialect::v1_13) {
    // 1.13 has no MULTI_GET; one GET per key gives the same answer.
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (const auto& k : keys) {
      impl_->request({.kind = op::get, .keys = {impl_->key(k)}});
      values.push_back(impl_->read_reply(op::get, impl_->reply_deadline()).value);
    }
    return values;
  }
  impl_->request({.kind = op::multi_get, .keys = impl_->keys(keys)});
  return impl_->read_reply(op::multi_get, impl_->reply_deadline(), keys.size()).values;
}

void tcp_store_client::multi_set(const std::vector<std::string>& keys,
                                 const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw store_error("multi_set: the number of keys and values differ");
  }
  if (impl_->dialect_ == wire::dialect::v1_13) {
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
    return;
  }
  impl_->request({.kind = op::multi_set, .keys = impl_->keys(keys), .values = values});
}

bool tcp_store_client::ping() {
  if (impl_->dialect_ != wire::dialect::v2) {
    throw store_error("PING is not supported by a PyTorch 1.13 store server");
  }
  impl_->ensure_connected();
  return impl_->ping_until(impl_->reply_deadline());
}

wire::dialect tcp_store_client::dialect() const { return impl_->dialect_; }

std::string tcp_store_client::local_address() const {
  boost::system::error_code ec;
  auto ep = impl_->socket_.local_endpoint(ec);
  return ec ? std::string() : ep.address().to_string();
}

}  // namespace dtrun::rendezvous
