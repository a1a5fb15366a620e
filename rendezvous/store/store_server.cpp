#include "rendezvous/store/store_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <system_error>
#include <vector>
#include <unordered_set>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "rendezvous/base/accept_loop.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/store/server_key_table.h"
#include "rendezvous/store/store.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

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
      : io_(io), options_(std::move(options)), accepting_(io, std::chrono::milliseconds(100)) {
    if (!options_.log) {
      options_.log = [](const std::string& line) { std::cerr << "dtrun-store: " << line << '\n'; };
    }
    if (options_.threads > 0) {
      // Lines come from every thread, the acceptor's outside the state
      // lock: one at a time, whole, under a lock of their own.
      options_.log = [inner = std::move(options_.log),
                      mutex = std::make_shared<std::mutex>()](const std::string& line) {
        std::lock_guard<std::mutex> one_line(*mutex);
        inner(line);
      };
    }
    ctx_.limits = {.request = options_.limits,
                   .output_high_water = options_.output_high_water,
                   .max_reply_bytes = options_.max_reply_bytes};
    ctx_.log = options_.log;
  }

  void listen();
  void start_accept();
  void accept_backlog();
  void admit(tcp::socket socket);

  // accept_backlog's bound, so that a flood of connections cannot starve
  // the requests of those already in.
  static constexpr int max_accepts_per_turn = 1024;
  void stop();

  void log(const std::string& line) const { options_.log(line); }

  bool threaded() const { return loops_ != nullptr; }
  // Held around every use of what the connections share: ctx_ (the key
  // table, the stats), sessions_, and every store_session, since a write
  // on one connection wakes waiters on others. When everything runs on
  // the caller's loop there is nobody to exclude, and the lock is not
  // taken: a wake-up then writes to the woken connection at once, from
  // inside the writer's request.
  std::unique_lock<std::mutex> lock_state() {
    return threaded() ? std::unique_lock<std::mutex>(state_mutex_)
                      : std::unique_lock<std::mutex>();
  }
  // An accepted connection, moved to the next thread's loop when there are
  // threads. (Accepting straight onto those loops would leave the
  // caller's io_context holding sockets of theirs in pending accepts,
  // destroyed after the loops are.)
  tcp::socket onto_its_loop(tcp::socket socket);

  asio::io_context& io_;
  store_server_options options_;
  // Out of descriptors or memory: the loop says so, gives the system a
  // moment (100 ms), and the server keeps serving the clients it has.
  accept_loop<tcp> accepting_;
  tcp::acceptor& acceptor_ = accepting_.acceptor();
  loop_threads* loops_ = nullptr;  // owned by store_server; null: the caller's loop
  std::mutex state_mutex_;
  store_context ctx_;
  std::unordered_set<std::shared_ptr<class session>> sessions_;
  bool stopped_ = false;
};

// One client connection's I/O: reads into the store_session's buffer,
// writes what it queues. Its I/O state (reading_, writing_, closed_,
// in_flight_) belongs to its loop's one thread; the store_session is used
// under the server's lock (lock_state).
class session : public std::enable_shared_from_this<session>, private session_host {
 public:
  session(tcp::socket socket, store_server::impl& server)
      : socket_(std::move(socket)),
        server_(server),
        loop_(static_cast<asio::io_context&>(
            asio::query(socket_.get_executor(), asio::execution::context))),
        core_(server.ctx_, *this, endpoint_text(socket_)) {}

  // On the connection's loop.
  void start() {
    enable_keepalive(socket_);
    read_more();
  }

  // On the connection's loop.
  void close() {
    if (closed_) return;
    closed_ = true;
    auto self = shared_from_this();  // the erase may drop the server's reference
    {
      auto lock = server_.lock_state();
      core_.close();
      --server_.ctx_.stats.connections_open;
      server_.sessions_.erase(self);
    }
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  asio::io_context& loop() { return loop_; }

  // Runs `step` on this connection's loop: at once when every connection
  // shares the caller's loop, posted when it lives on a thread of its own
  // (the caller may be another connection's thread, or the acceptor).
  void on_its_loop(void (session::*step)()) {
    if (server_.threaded()) {
      asio::post(loop_, [self = shared_from_this(), step] { ((*self).*step)(); });
    } else {
      (this->*step)();
    }
  }

 private:
  // (async_wait, then a non-blocking read, would save the EAGAIN of
  // async_read_some's first try but costs an epoll_ctl per wait in Asio's
  // reactor: measured no better.)
  void read_more() {
    if (closed_ || reading_) return;
    std::span<std::uint8_t> space;
    {
      auto lock = server_.lock_state();
      if (!core_.wants_input()) return;  // resumed by the write's completion
      try {
        space = core_.read_space();
      } catch (const std::bad_alloc&) {
        core_.fail("out of memory for its request buffer");
        return;
      } catch (const std::length_error&) {
        core_.fail("out of memory for its request buffer");
        return;
      }
    }
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(space.data(), space.size()),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          if (ec) {
            // EOF or reset: the client went away; its waits go with it.
            self->close();
            return;
          }
          {
            auto lock = self->server_.lock_state();
            self->server_.ctx_.stats.bytes_received += n;
            self->core_.received(n);
          }
          self->read_more();
        });
  }

  // Called under the server's lock, maybe from another connection's
  // thread: with threads, the write is started on this connection's own
  // loop (a post from that loop's thread is a cheap local queue push).
  void output_ready() override { on_its_loop(&session::flush); }

  void close_soon() override {
    // Not now: this may run inside another session's key_table update.
    asio::post(loop_, [self = shared_from_this()] { self->close(); });
  }

  // On the connection's loop (without threads, maybe from inside another
  // session's request: the lock is not taken then).
  void flush() {
    if (writing_ || closed_) return;
    {
      auto lock = server_.lock_state();
      if (!core_.has_output()) return;
      in_flight_ = core_.take_output();
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(in_flight_),
                      [self = shared_from_this()](const boost::system::error_code& ec,
                                                  std::size_t) { self->on_written(ec); });
  }

  void on_written(const boost::system::error_code& ec) {
    writing_ = false;
    auto sent = in_flight_.size();
    // Free it: a large reply must not stay allocated.
    in_flight_ = std::string();
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    {
      auto lock = server_.lock_state();
      server_.ctx_.stats.bytes_sent += sent;
      core_.output_sent();
    }
    flush();
    read_more();
  }

  tcp::socket socket_;
  store_server::impl& server_;
  asio::io_context& loop_;
  store_session core_;
  bool reading_ = false, writing_ = false, closed_ = false;
  std::string in_flight_;
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
    if (!ec) acceptor_.non_blocking(true, ec);  // for accept_backlog
  };
  open_and_bind(endpoint);
  if (ec && options_.host.empty()) {
    // No IPv6 on this machine: every IPv4 interface instead.
    open_and_bind(tcp::endpoint(tcp::v4(), options_.port));
  }
  if (ec) {
    auto where = fmt::format("{}:{}", options_.host.empty() ? "*" : options_.host, options_.port);
    if (ec == asio::error::address_in_use) {
      throw store_address_in_use(
          fmt::format("cannot listen on {}: the port is in use; stop the other process or "
                      "choose another port (0 picks a free one)",
                      where));
    }
    throw store_error(fmt::format("cannot listen on {}: {}", where, ec.message()));
  }
}

// The loop's callbacks run only while it, a member of this impl, lives
// and is not stopped.
void store_server::impl::start_accept() {
  if (stopped_) return;
  accepting_.start(
      [this](tcp::socket socket) {
        admit(std::move(socket));
        accept_backlog();
      },
      [this](const boost::system::error_code& ec) {
        log(fmt::format("accept failed: {}; retrying in 100 ms", ec.message()));
      });
}

// When thousands of nodes connect at once (every agent of a 10,000-node
// job rejoining), the kernel's accept queue (somaxconn, 4096 here) fills in
// milliseconds and further SYNs are dropped, each costing its client a 1 s
// retransmission. One accept per turn of the loop, between thousands of
// requests, drains it too slowly: take whatever else is queued now.
void store_server::impl::accept_backlog() {
  for (int i = 0; i < max_accepts_per_turn && !stopped_; ++i) {
    boost::system::error_code ec;
    tcp::socket socket(io_);
    acceptor_.accept(socket, ec);  // the acceptor is non-blocking
    if (ec) return;  // would_block, or an error the next async_accept reports
    admit(std::move(socket));
  }
}

void store_server::impl::admit(tcp::socket socket) {
  {
    auto lock = lock_state();
    ++ctx_.stats.connections_accepted;
  }
  if (options_.admit) {
    if (auto refusal = options_.admit(socket.native_handle()); !refusal.empty()) {
      {
        auto lock = lock_state();
        ++ctx_.stats.connections_refused;
      }
      log(fmt::format("refused connection from {}: {}", printable(endpoint_text(socket)),
                      printable(refusal)));
      boost::system::error_code ignored;
      socket.close(ignored);
      return;
    }
  }
  try {
    auto s = std::make_shared<session>(onto_its_loop(std::move(socket)), *this);
    {
      auto lock = lock_state();
      sessions_.insert(s);
      ++ctx_.stats.connections_open;
    }
    s->on_its_loop(&session::start);
  } catch (const std::bad_alloc&) {
    // `socket` was moved into a session that no longer exists, or is
    // still ours: either way it closes with this scope.
    log("out of memory accepting a connection; it was closed");
  } catch (const boost::system::system_error& e) {
    // Moving it to a thread's loop failed (the client reset it at once,
    // or the kernel is out of memory for the loop's registration).
    log(fmt::format("could not serve a new connection: {}; it was closed", e.what()));
  }
}

tcp::socket store_server::impl::onto_its_loop(tcp::socket socket) {
  if (!threaded()) return socket;
  auto protocol = socket.local_endpoint().protocol();  // throws system_error
  tcp::socket moved(loops_->next());
  auto fd = socket.release();
  boost::system::error_code ec;
  moved.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);  // owned by neither socket now
    throw boost::system::system_error(ec);
  }
  return moved;
}

void store_server::impl::stop() {
  if (stopped_) return;
  stopped_ = true;
  accepting_.stop();
  std::vector<std::shared_ptr<session>> all;
  {
    auto lock = lock_state();
    all.assign(sessions_.begin(), sessions_.end());  // close() erases from sessions_
  }
  for (const auto& s : all) s->on_its_loop(&session::close);
}

store_server::store_server(asio::io_context& io, store_server_options options) {
  impl_ = std::make_shared<impl>(io, std::move(options));
  if (impl_->options_.threads > 0) {
    const auto count = impl_->options_.threads;
    try {
      threads_ = std::make_unique<loop_threads>(
          count, [log = impl_->options_.log](const std::exception& e) {
            log(fmt::format("a store thread's handler failed: {}; the thread goes on", e.what()));
          });
    } catch (const std::system_error& e) {
      throw store_error(fmt::format("cannot start {} store threads: {}; ask for fewer", count,
                                    e.what()));
    }
  }
  impl_->loops_ = threads_.get();
  raise_open_file_limit();
  impl_->listen();
  impl_->start_accept();
}

store_server::~store_server() {
  impl_->stop();
  // The connections close on their own loops; then the threads end.
  if (threads_) threads_->finish();
}

std::uint16_t store_server::port() const {
  boost::system::error_code ec;
  auto ep = impl_->acceptor_.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void store_server::stop() { impl_->stop(); }

void store_server::clear_keys() {
  auto lock = impl_->lock_state();
  impl_->ctx_.table.clear();
}

store_server_stats store_server::stats() const {
  auto lock = impl_->lock_state();
  return impl_->ctx_.stats;
}

}  // namespace dtrun::rendezvous
