#include "rendezvous/store/async_store_client.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <random>
#include <span>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "rendezvous/base/generation_timer.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using wire::op;

namespace {

// The two lanes of one connection (async_store_client::watch_lane).
constexpr int main_queue = 0;
constexpr int watch_queue = 1;

// Any duration a caller passes becomes a timer setting that cannot
// overflow the clock: negative is "now", beyond no_timeout is no_timeout.
store_duration bounded(store_duration d) {
  return std::clamp(d, store_duration::zero(), no_timeout);
}

// The jitter of connection retries. One per thread, seeded on first use:
// a random_device per client cost 6% of a 2,048-node rendezvous (on a VM
// its CPUID probe traps), and most clients never retry.
std::mt19937& retry_rng() {
  thread_local std::mt19937 rng{std::random_device{}()};
  return rng;
}

}  // namespace

class async_store_client::impl : public std::enable_shared_from_this<async_store_client::impl> {
 public:
  struct operation {
    std::string request;
    // The op whose reply is awaited (wire::parse_reply): the request's, or
    // CANCEL_WAIT once a WAIT is being cancelled (on timeout, or to
    // suspend it), or VALIDATE (no reply) for a 1.13 hello.
    op answered = op::set;
    std::size_t keys = 0;      // the request's number of keys (MULTI_GET's values)
    std::uint32_t nonce = 0;   // the hello's PING nonce, to be echoed
    store_callback done;
    std::optional<store_duration> wait_timeout;  // set for WAIT
    std::vector<std::string> wait_keys;          // for the timeout message
    std::optional<store_clock::time_point> deadline;  // a WAIT's, set when first sent
    bool suspending = false;  // the cancel suspends it (the watch lane gives way)
    bool alone = false;       // sent in a batch of its own (the hello)
    int lane = 0;             // main_queue or watch_queue
    std::uint64_t id = 0;

    bool cancelling() const { return answered == op::cancel_wait; }
  };

  impl(asio::io_context& io, tcp_store_client_options options)
      : io_(io),
        options_(std::move(options)),
        endpoint_text_(fmt::format("{}:{}", options_.host, options_.port)),
        socket_(io),
        timer_(io),
        retry_timer_(io),
        resolver_(io) {}

  // --- connecting -------------------------------------------------------

  // Each lane's client calls it once (the wrapper checks); the first call
  // connects, a later one completes with the first.
  void connect(store_callback done) {
    if (closed_ || hello_answered_) {
      // Exactly one completion per call, from the loop as always.
      auto error = closed_ ? std::make_exception_ptr(store_connection_error(fmt::format(
                                 "the connection to the store at {} is closed", endpoint_text_)))
                           : hello_error_;
      asio::post(io_, [done = std::move(done), error] { done({.error = error}); });
      return;
    }
    connect_done_.push_back(std::move(done));
    if (connect_started_) return;
    connect_started_ = true;
    connect_deadline_ = store_clock::now() + bounded(options_.connect_timeout);
    backoff_ = std::chrono::milliseconds(10);
    try_connect();
  }

  void try_connect() {
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

  void retry_connect(const std::string& why) {
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

  // Runs `on_expiry` at `deadline` only if this arming is still current
  // (generation_timer) and the client is still connecting: once it
  // connected or closed, the expiry is stale.
  void arm_retry_timer(std::chrono::steady_clock::time_point deadline,
                       std::function<void()> on_expiry) {
    retry_timer_.arm_at(deadline, [self = shared_from_this(), on_expiry = std::move(on_expiry)] {
      if (self->closed_ || self->connected_) return;
      on_expiry();
    });
  }

  void disarm_retry_timer() { retry_timer_.cancel(); }

  void on_connected() {
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

  // --- queueing ---------------------------------------------------------

  // The operation for request `r`, awaiting r's reply. Throws store_error
  // (before anything is queued) when the dialect lacks r.kind.
  operation make_operation(const wire::request& r, store_callback done) const {
    operation o;
    o.request = encode(r);
    o.answered = r.kind;
    o.keys = r.keys.size();
    o.done = std::move(done);
    return o;
  }

  void enqueue(int lane, const wire::request& r, store_callback done) {
    enqueue(lane, make_operation(r, std::move(done)));
  }

  // A continuation (the GET after a get's WAIT) goes first in its lane, so
  // that the lane's operations complete in the order they were called.
  void enqueue_next(int lane, const wire::request& r, store_callback done) {
    enqueue(lane, make_operation(r, std::move(done)), true);
  }

  void enqueue(int lane, operation o, bool first = false) {
    if (closed_) {
      auto error = std::make_exception_ptr(store_connection_error(
          fmt::format("the connection to the store at {} is closed", endpoint_text_)));
      asio::post(io_, [done = std::move(o.done), error] { done({.error = error}); });
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

  // Refuses, with store_error, an op the dialect lacks (1.13: MULTI_GET,
  // CANCEL_WAIT...), before anything is queued.
  void require(op o) const {
    if (!wire::byte_for(options_.dialect, o)) {
      throw store_error(fmt::format("{} is not supported by a PyTorch 1.13 store server",
                                    wire::op_name(o)));
    }
  }

  std::string encode(const wire::request& r) const {
    require(r.kind);
    return wire::encode_request(options_.dialect, r);
  }

  std::string key(const std::string& k) const { return options_.key_prefix + k; }
  std::vector<std::string> keys(std::vector<std::string> ks) const {
    for (auto& k : ks) k = key(k);
    return ks;
  }

  // When nothing is in flight, sends what the lanes hold, the main lane's
  // first, in one write (a batch; the server answers in order): up to
  // max_batch operations, ending at the first WAIT, since the server
  // answers a WAIT whenever its keys appear and a reply behind it could
  // come first. Replies are only read once the write has completed: the
  // server may answer before Asio reports the write done, and the replies
  // wait in the buffer. While the watch lane's WAIT is in flight, work in
  // the main lane suspends it instead.
  //
  // An operation called on an idle connection is written at once (Asio
  // tries the write when it is started), not at the end of the handler:
  // an agent that sets a key and then stops its loop or exits (a failure
  // report, the exit barrier) must still have sent it. Deferring the pump
  // to batch a handler's calls made a two-node job wait out its exit
  // barrier's timeout. So batches form from what queues while a batch is
  // in flight.
  void pump() {
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

  // Moves operations from the front of `lane` into flight_, their requests
  // onto batch_, until the batch is full or ends (a WAIT, the hello).
  // Returns whether it ended.
  bool take_batch(std::deque<operation>& lane) {
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

  // The watch lane's WAIT (sent, its keys absent) gives way to main-lane
  // work: CANCEL_WAIT, and once the server says WAIT_CANCELED it goes back
  // to the front of its lane, to be sent again, with what is left of its
  // timeout, when the main lane is idle. Keys that arrived meanwhile make
  // the server answer STOP_WAITING first: the wait then simply succeeds.
  // A 1.13 server cannot cancel: there the main lane waits behind it.
  //
  // The main lane's work goes in the same write, right behind the
  // CANCEL_WAIT (the server answers in order), not a round trip later: an
  // agent that sets a key and then exits (the last to leave sets
  // `all_left`) must have sent it.
  void suspend_watch_if_needed() {
    if (flight_.size() != 1 || flight_.front().lane != watch_queue || !sent_ ||
        lanes_[main_queue].empty() || options_.dialect != wire::dialect::v2) {
      return;
    }
    auto& h = head();
    if (!h.wait_timeout || h.cancelling()) return;
    cancel_head_wait(true);
  }

  // Asks the server to drop the head's WAIT (sent, the only operation in
  // flight, so no write is in progress and batch_ is free): on its
  // timeout, or to `suspend` it, in which case the main lane's work goes
  // in the same write. The server answers WAIT_CANCELED, after a
  // STOP_WAITING when the keys arrived in the meantime (try_complete).
  void cancel_head_wait(bool suspend) {
    disarm_timer();
    auto& h = head();
    h.answered = op::cancel_wait;
    h.suspending = suspend;
    batch_ = encode({.kind = op::cancel_wait});
    if (suspend) take_batch(lanes_[main_queue]);  // after h: `h` stays valid (deque)
    send_for_head(batch_, h.id, "cancelling a wait");
  }

  // The oldest operation in flight: the next reply is its.
  operation& head() { return flight_.front(); }
  bool head_is(std::uint64_t id) const { return !flight_.empty() && flight_.front().id == id; }

  // Writes bytes on behalf of the head operation `id`; once written, its
  // timer runs and its reply may be read.
  void send_for_head(const std::string& bytes, std::uint64_t id, const char* what) {
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

  // A timeout acts only on the operation that armed it: the timer drops
  // an expiry of an earlier arming (generation_timer: completing or
  // closing disarms, and re-arming after CANCEL_WAIT replaces the first
  // arming), and the handler carries the operation's id, so it does
  // nothing unless that is still the head in flight.
  void arm_timer() {
    auto& h = head();
    // What is left of a wait's deadline, after a suspension.
    auto deadline = h.wait_timeout && !h.cancelling()
                        ? *h.deadline
                        : std::chrono::steady_clock::now() + bounded(options_.timeout);
    timer_.arm_at(deadline, [self = shared_from_this(), id = h.id] { self->on_timeout(id); });
  }

  void disarm_timer() { timer_.cancel(); }

  void on_timeout(std::uint64_t id) {
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
      done({.error = error});
      return;
    }
    close_with(std::make_exception_ptr(store_timeout(fmt::format(
        "the store at {} did not answer within {} ms", endpoint_text_, options_.timeout.count()))));
  }

  // What a complete reply means to the operation's caller.
  static store_result to_result(const operation& o, wire::reply r) {
    store_result result;
    switch (o.answered) {
      case op::ping:  // the hello
        if (r.nonce != o.nonce) {
          result.error = std::make_exception_ptr(
              store_connection_error("the server did not echo the ping; is it a TCPStore?"));
        }
        break;
      case op::wait:
        if (r.byte != wire::wait_stop_waiting) {
          result.error = std::make_exception_ptr(
              store_error(fmt::format("unexpected reply {} to WAIT", r.byte)));
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

  std::exception_ptr wait_timeout_error(const operation& o) const {
    return std::make_exception_ptr(store_wait_timeout(
        fmt::format("timed out after {} ms waiting for key(s) {} in the store at {}",
                    o.wait_timeout->count(), quoted_keys(o.wait_keys), endpoint_text_)));
  }

  // --- reading ----------------------------------------------------------

  // One read is always outstanding while connected, so a closed connection
  // is noticed when it happens, even with nothing in flight.
  void read_loop() {
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

  void try_complete() {
    while (sent_ && !flight_.empty() && !closed_) {
      auto& h = head();
      // Parsed again from its first byte on every read; a value is copied
      // only once it has all arrived, so a large one costs no more.
      auto parsed = wire::parse_reply(
          h.answered, std::span<const std::uint8_t>(buffer_.data() + begin_, end_ - begin_),
          h.keys, options_.max_value_bytes);
      if (parsed.status == wire::parse_status::need_more) break;
      if (parsed.status == wire::parse_status::bad) {
        close_with(std::make_exception_ptr(store_error(
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
        if (cancelled) result.error = wait_timeout_error(h);
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
          store_error(fmt::format("the store at {} sent bytes nobody asked for", endpoint_text_))));
      return;
    }
  }

  // --- failure ----------------------------------------------------------

  void lost(const char* what, const boost::system::error_code& ec) {
    close_with(std::make_exception_ptr(store_connection_error(fmt::format(
        "lost the connection to the store at {} while {}: {}", endpoint_text_, what,
        ec == asio::error::eof ? std::string("the server closed it") : ec.message()))));
  }

  void fail_all(std::exception_ptr error) { close_with(std::move(error)); }

  void close_with(std::exception_ptr error) {
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
    for (auto& done : std::exchange(connect_done_, {})) done({.error = error});
    for (auto& o : pending) {
      if (o.done) o.done({.error = error});
    }
  }

  asio::io_context& io_;
  tcp_store_client_options options_;
  std::string endpoint_text_;
  tcp::socket socket_;
  generation_timer timer_;        // the head operation's timeout
  generation_timer retry_timer_;  // a connection attempt's deadline, then the pause after it
  tcp::resolver resolver_;
  std::chrono::milliseconds backoff_{10};
  store_clock::time_point connect_deadline_;
  std::vector<store_callback> connect_done_;
  // Operations not yet sent, per lane, and those sent, in order, whose
  // replies are awaited.
  std::deque<operation> lanes_[2];
  std::deque<operation> flight_;
  std::string batch_;  // the requests of a batch, while it is written
  static constexpr std::size_t max_batch = 64;
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0, end_ = 0;
  bool connected_ = false, sent_ = false, closed_ = false;
  bool connect_started_ = false;
  bool hello_answered_ = false;
  std::exception_ptr hello_error_;
  bool attempt_expired_ = false;  // the current connection attempt ran out of time
  std::uint64_t last_id_ = 0;
};

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
  impl_->close_with(std::make_exception_ptr(
      store_connection_error(fmt::format("the client of {} was closed", impl_->endpoint_text_))));
}

void async_store_client::connect(store_callback done) {
  if (std::exchange(connect_called_, true)) {
    // Exactly one completion per call, from the loop as always.
    auto error = std::make_exception_ptr(store_connection_error(fmt::format(
        "connect() was already called for the store at {}", impl_->endpoint_text_)));
    asio::post(impl_->io_, [done = std::move(done), error] { done({.error = error}); });
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
