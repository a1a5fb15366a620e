#include "rendezvous/store_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <fstream>
#include <iostream>
#include <map>
#include <unordered_set>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "rendezvous/server_key_table.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Small per-connection buffer so that thousands of idle clients stay cheap;
// it grows only while a large request is arriving.
constexpr std::size_t initial_buffer_bytes = 4096;
constexpr std::size_t read_chunk_bytes = 64 * 1024;
// Stop reading from a client whose replies pile up (it is not reading).
constexpr std::size_t output_high_water = 16 * 1024 * 1024;

int listen_backlog(int requested) {
  if (requested > 0) return requested;
  std::ifstream f("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (f >> value && value > 0) return value;
  return SOMAXCONN;
}

// A store that holds thousands of connections needs more than the default
// 1024 descriptors; the hard limit is ours to use.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Dead peers (a node that lost power) never send FIN; keepalive lets the
// kernel tell us within about a minute so their waits are dropped.
void enable_keepalive(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  int fd = socket.native_handle();
  int idle = 30, interval = 10, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

std::string endpoint_text(const tcp::socket& socket) {
  boost::system::error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "unknown peer";
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace

class store_server::impl : public std::enable_shared_from_this<store_server::impl> {
 public:
  impl(asio::io_context& io, store_server_options options)
      : io_(io), options_(std::move(options)), acceptor_(io), retry_timer_(io) {
    if (!options_.log) {
      options_.log = [](const std::string& line) { std::cerr << "dtrun-store: " << line << '\n'; };
    }
  }

  void listen();
  void start_accept();
  void stop();

  void log(const std::string& line) const { options_.log(line); }

  asio::io_context& io_;
  store_server_options options_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  key_table table_;
  store_server_stats stats_;
  std::unordered_set<std::shared_ptr<class session>> sessions_;
  bool stopped_ = false;
};

// One client connection: reads a byte stream, parses requests, answers in
// order. All state lives on the event loop thread.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, store_server::impl& server)
      : socket_(std::move(socket)), server_(server), peer_(endpoint_text(socket_)) {
    buffer_.resize(initial_buffer_bytes);
  }

  void start() {
    enable_keepalive(socket_);
    read_more();
  }

  void close(const std::string& reason = {}) {
    if (closed_) return;
    closed_ = true;
    if (!reason.empty()) {
      ++server_.stats_.connections_rejected;
      server_.log(fmt::format("closing connection from {}: {}", peer_, reason));
    }
    for (auto& w : waits_) server_.table_.cancel(w);
    waits_.clear();
    if (watch_id_ != 0) server_.table_.unwatch(watch_id_);
    execute_wills();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    --server_.stats_.connections_open;
    server_.sessions_.erase(shared_from_this());
  }

 private:
  void read_more() {
    if (closed_ || reading_) return;
    if (queued_output() > output_high_water) return;  // resumed by on_written
    if (begin_ == end_) begin_ = end_ = 0;
    std::size_t want = std::max(wanted_, end_ - begin_ + 1);
    if (begin_ > 0 && buffer_.size() - begin_ < want + read_chunk_bytes / 4) {
      // Slide the unparsed tail to the front before growing.
      std::copy(buffer_.begin() + begin_, buffer_.begin() + end_, buffer_.begin());
      end_ -= begin_;
      begin_ = 0;
    }
    if (buffer_.size() < want || buffer_.size() == end_) {
      buffer_.resize(std::max({want, end_ + read_chunk_bytes, initial_buffer_bytes}));
    } else if (end_ == 0 && buffer_.size() > 4 * read_chunk_bytes) {
      // Give back the memory a large request needed.
      buffer_.resize(initial_buffer_bytes);
      buffer_.shrink_to_fit();
    }
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(buffer_.data() + end_, buffer_.size() - end_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          if (ec) {
            // EOF or reset: the client went away; its waits go with it.
            self->close();
            return;
          }
          self->end_ += n;
          self->process();
          self->read_more();
        });
  }

  void process() {
    while (!closed_) {
      // A client that pipelines requests without reading the replies gets
      // no more answers until its output drains (flush resumes here).
      if (queued_output() > output_high_water) return;
      std::span<const std::uint8_t> pending(buffer_.data() + begin_, end_ - begin_);
      if (!dialect_) {
        dialect_ = wire::detect_dialect(pending);
        if (!dialect_) return;
        expect_validate_ = (*dialect_ == wire::dialect::v2);
      }
      auto parsed = wire::parse_request(*dialect_, pending, server_.options_.limits);
      if (parsed.status == wire::parse_status::bad) {
        close(parsed.error);
        return;
      }
      if (parsed.status == wire::parse_status::need_more) {
        wanted_ = parsed.bytes_wanted;
        return;
      }
      wanted_ = 0;
      begin_ += parsed.consumed;
      ++server_.stats_.requests;
      handle(parsed.req);
    }
  }

  void handle(wire::request& r) {
    using wire::op;
    auto& table = server_.table_;
    if (expect_validate_ != (r.kind == op::validate)) {
      // 2.x clients validate exactly once, first; anything else is not a
      // TCPStore client we understand.
      close(r.kind == op::validate ? "VALIDATE sent twice" : "first command was not VALIDATE");
      return;
    }
    std::string out;
    switch (r.kind) {
      case op::validate:
        expect_validate_ = false;
        return;
      case op::ping:
        wire::put_u32(out, r.nonce);
        break;
      case op::set:
        remember_will(r.keys[0], r.values[0]);
        table.set(r.keys[0], std::move(r.values[0]));
        return;
      case op::compare_set:
        wire::put_bytes(out, table.compare_set(r.keys[0], r.values[0], r.values[1]));
        break;
      case op::get:
        if (auto* v = table.find(r.keys[0])) {
          wire::put_bytes(out, *v);
        } else if (*dialect_ == wire::dialect::v1_13) {
          // A 1.13 client WAITs before every GET, so a missing key means it
          // is out of step: a wait it timed out on was answered late, and it
          // took that stray reply for this wait's. Dropping the connection
          // (as torch's own 1.13 server does) makes it raise instead of
          // reading an empty value as the key's.
          close(fmt::format("GET of missing key '{}' from a 1.13 client (out of step after a "
                            "timed-out wait?)",
                            r.keys[0]));
          return;
        } else {
          // 2.x clients cancel timed-out waits; a key deleted between WAIT
          // and GET reads empty, as on PyTorch's libuv server.
          wire::put_bytes(out, {});
        }
        break;
      case op::add: {
        auto sum = table.add(r.keys[0], r.number);
        if (!sum) {
          close(fmt::format("ADD on key '{}': its value is not a number, or the sum overflows "
                            "64 bits",
                            r.keys[0]));
          return;
        }
        wire::put_i64(out, *sum);
        break;
      }
      case op::check:
        wire::put_u8(out, table.check(r.keys) ? wire::check_ready : wire::check_not_ready);
        break;
      case op::wait:
        start_wait(r.keys);
        return;
      case op::num_keys:
        wire::put_i64(out, table.size());
        break;
      case op::delete_key:
        wire::put_i64(out, table.erase(r.keys[0]) ? 1 : 0);
        break;
      case op::watch_key:
        start_watch(r.keys[0]);
        return;
      case op::append:
        table.append(r.keys[0], r.values[0]);
        return;
      case op::multi_get:
        for (const auto& k : r.keys) {
          auto* v = table.find(k);
          wire::put_bytes(out, v ? std::string_view(*v) : std::string_view());
        }
        break;
      case op::multi_set:
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
          remember_will(r.keys[i], r.values[i]);
          table.set(r.keys[i], std::move(r.values[i]));
        }
        return;
      case op::cancel_wait:
        for (auto& w : waits_) table.cancel(w);
        waits_.clear();
        wire::put_u8(out, wire::wait_canceled);
        break;
      case op::queue_push:
        table.queue_push(r.keys[0], std::move(r.values[0]));
        return;
      case op::queue_pop: {
        auto [length, value] = table.queue_pop(r.keys[0]);
        wire::put_i64(out, length);
        if (value) wire::put_bytes(out, *value);
        break;
      }
      case op::queue_len:
        wire::put_i64(out, table.queue_len(r.keys[0]));
        break;
      case op::list_keys: {
        auto keys = table.list_keys();
        wire::put_i64(out, static_cast<std::int64_t>(keys.size()));
        for (const auto& k : keys) wire::put_bytes(out, k);
        break;
      }
    }
    send(std::move(out));
  }

  void start_wait(const std::vector<std::string>& keys) {
    // `this` stays valid for the callback: close() cancels every wait.
    auto handle = server_.table_.wait(keys, [this] { on_wait_ready(); });
    if (!handle) {
      send(std::string(1, static_cast<char>(wire::wait_stop_waiting)));
      return;
    }
    waits_.push_back(std::move(handle));
  }

  void on_wait_ready() {
    std::erase_if(waits_, [](const wait_handle& w) { return w->remaining == 0; });
    send(std::string(1, static_cast<char>(wire::wait_stop_waiting)));
  }

  void start_watch(const std::string& key) {
    watch_id_ = server_.table_.watch(
        key, [this](std::uint8_t event, const std::string& k, std::string_view old_value,
                    std::string_view new_value) {
          std::string out;
          wire::put_u8(out, event);
          wire::put_bytes(out, k);
          wire::put_bytes(out, old_value);
          wire::put_bytes(out, new_value);
          send(std::move(out));
        });
    send(std::string(1, static_cast<char>(wire::watch_callback_registered)));
  }

  // A "last will" (see store_server.h): remembered per connection, executed
  // when the connection closes while the will key still holds it.
  void remember_will(const std::string& key, const std::string& value) {
    if (!key.starts_with(will_key_prefix)) return;
    auto newline = value.find('\n');
    if (newline == std::string::npos || newline == 0) return;  // not a will: stored as is
    wills_.insert_or_assign(key, value);
  }

  void execute_wills() {
    auto& table = server_.table_;
    for (const auto& [key, will] : wills_) {
      const std::string* current = table.find(key);
      if (current == nullptr || *current != will) continue;  // withdrawn or replaced
      auto newline = will.find('\n');
      table.erase(key);
      table.set(will.substr(0, newline), will.substr(newline + 1));
    }
    wills_.clear();
  }

  std::size_t queued_output() const { return pending_output_.size() + inflight_output_.size(); }

  void send(std::string bytes) {
    if (closed_) return;
    if (pending_output_.empty()) {
      pending_output_ = std::move(bytes);
    } else {
      pending_output_.append(bytes);
    }
    flush();
  }

  void flush() {
    if (writing_ || pending_output_.empty() || closed_) return;
    writing_ = true;
    inflight_output_ = std::move(pending_output_);
    pending_output_.clear();
    asio::async_write(socket_, asio::buffer(inflight_output_),
                      [self = shared_from_this()](const boost::system::error_code& ec,
                                                  std::size_t) {
                        self->writing_ = false;
                        self->inflight_output_.clear();
                        if (self->closed_) return;
                        if (ec) {
                          self->close();
                          return;
                        }
                        self->flush();
                        self->process();  // requests held back by the high-water mark
                        self->read_more();
                      });
  }

  tcp::socket socket_;
  store_server::impl& server_;
  std::string peer_;
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0, end_ = 0, wanted_ = 0;
  std::optional<wire::dialect> dialect_;
  bool expect_validate_ = false;
  bool reading_ = false, writing_ = false, closed_ = false;
  std::string pending_output_, inflight_output_;
  std::vector<wait_handle> waits_;
  std::uint64_t watch_id_ = 0;
  std::map<std::string, std::string> wills_;
};

void store_server::impl::listen() {
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  if (options_.host.empty()) {
    endpoint = tcp::endpoint(tcp::v6(), options_.port);
  } else {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      throw store_error(fmt::format("cannot resolve store host '{}': {}; give an IP address "
                                    "or a name this machine can resolve",
                                    options_.host, ec.message()));
    }
    endpoint = *results.begin();
  }

  auto open_and_bind = [&](const tcp::endpoint& ep) {
    acceptor_.close(ec);
    acceptor_.open(ep.protocol(), ec);
    if (ec) return;
    acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (ep.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);
    ec.clear();
    acceptor_.bind(ep, ec);
    if (ec) return;
    acceptor_.listen(listen_backlog(options_.backlog), ec);
  };
  open_and_bind(endpoint);
  if (ec && options_.host.empty()) {
    // No IPv6 on this machine: every IPv4 interface instead.
    open_and_bind(tcp::endpoint(tcp::v4(), options_.port));
  }
  if (ec) {
    auto where = fmt::format("{}:{}", options_.host.empty() ? "*" : options_.host, options_.port);
    if (ec == asio::error::address_in_use) {
      throw store_error(fmt::format("cannot listen on {}: the port is in use; stop the other "
                                    "process or choose another port (0 picks a free one)",
                                    where));
    }
    throw store_error(fmt::format("cannot listen on {}: {}", where, ec.message()));
  }
}

void store_server::impl::start_accept() {
  if (stopped_) return;
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& ec,
                                                     tcp::socket socket) {
    if (self->stopped_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors or memory: say so, give the system a moment,
      // and keep serving the clients we have.
      self->log(fmt::format("accept failed: {}; retrying in 100 ms", ec.message()));
      self->retry_timer_.expires_after(std::chrono::milliseconds(100));
      self->retry_timer_.async_wait([self](const boost::system::error_code& timer_ec) {
        if (!timer_ec) self->start_accept();
      });
      return;
    }
    ++self->stats_.connections_accepted;
    if (self->options_.admit) {
      if (auto refusal = self->options_.admit(socket.native_handle()); !refusal.empty()) {
        ++self->stats_.connections_refused;
        self->log(fmt::format("refused connection from {}: {}", endpoint_text(socket), refusal));
        boost::system::error_code ignored;
        socket.close(ignored);
        self->start_accept();
        return;
      }
    }
    ++self->stats_.connections_open;
    auto s = std::make_shared<session>(std::move(socket), *self);
    self->sessions_.insert(s);
    s->start();
    self->start_accept();
  });
}

void store_server::impl::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  auto all = sessions_;  // close() erases from sessions_
  for (const auto& s : all) s->close();
}

store_server::store_server(asio::io_context& io, store_server_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {
  raise_open_file_limit();
  impl_->listen();
  impl_->start_accept();
}

store_server::~store_server() { impl_->stop(); }

std::uint16_t store_server::port() const {
  boost::system::error_code ec;
  auto ep = impl_->acceptor_.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void store_server::stop() { impl_->stop(); }

const store_server_stats& store_server::stats() const { return impl_->stats_; }

}  // namespace dtrun::rendezvous
