// The connection behind async_store_client (async_store_client.h) and
// its two lanes, one file per job:
//   async_store_client.cpp          the public operations, as requests
//   async_store_client_connect.cpp  connecting, retries, the hello; failure
//   async_store_client_queue.cpp    the lanes, batches, the watch lane's
//                                   suspended WAIT, timeouts
//   async_store_client_replies.cpp  reading replies, completing operations
// Internal to rendezvous/store.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>

#include "rendezvous/base/generation_timer.h"
#include "rendezvous/store/async_store_client.h"
#include "rendezvous/store/store.h"
#include "rendezvous/store/tcp_store_client.h"
#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous {

namespace async_store_detail {

// The two lanes of one connection (async_store_client::watch_lane).
inline constexpr int main_queue = 0;
inline constexpr int watch_queue = 1;

// Any duration a caller passes becomes a timer setting that cannot
// overflow the clock: negative is "now", beyond no_timeout is no_timeout.
inline store_duration bounded(store_duration d) {
  return std::clamp(d, store_duration::zero(), no_timeout);
}

}  // namespace async_store_detail

class async_store_client::impl : public std::enable_shared_from_this<async_store_client::impl> {
  using op = wire::op;
  using tcp = boost::asio::ip::tcp;

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

  impl(boost::asio::io_context& io, tcp_store_client_options options)
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
  void connect(store_callback done);

  void try_connect();

  void retry_connect(const std::string& why);

  // Runs `on_expiry` at `deadline` only if this arming is still current
  // (generation_timer) and the client is still connecting: once it
  // connected or closed, the expiry is stale.
  void arm_retry_timer(std::chrono::steady_clock::time_point deadline,
                       std::function<void()> on_expiry);

  void disarm_retry_timer() { retry_timer_.cancel(); }

  void on_connected();

  // --- queueing ---------------------------------------------------------

  // The operation for request `r`, awaiting r's reply. Throws store_error
  // (before anything is queued) when the dialect lacks r.kind.
  operation make_operation(const wire::request& r, store_callback done) const;

  void enqueue(int lane, const wire::request& r, store_callback done);

  // A continuation (the GET after a get's WAIT) goes first in its lane, so
  // that the lane's operations complete in the order they were called.
  void enqueue_next(int lane, const wire::request& r, store_callback done);

  void enqueue(int lane, operation o, bool first = false);

  // Refuses, with store_error, an op the dialect lacks (1.13: MULTI_GET,
  // CANCEL_WAIT...), before anything is queued.
  void require(op o) const;

  std::string encode(const wire::request& r) const;

  std::string key(const std::string& k) const { return options_.key_prefix + k; }
  std::vector<std::string> keys(std::vector<std::string> ks) const;

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
  void pump();

  // Moves operations from the front of `lane` into flight_, their requests
  // onto batch_, until the batch is full or ends (a WAIT, the hello).
  // Returns whether it ended.
  bool take_batch(std::deque<operation>& lane);

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
  void suspend_watch_if_needed();

  // Asks the server to drop the head's WAIT (sent, the only operation in
  // flight, so no write is in progress and batch_ is free): on its
  // timeout, or to `suspend` it, in which case the main lane's work goes
  // in the same write. The server answers WAIT_CANCELED, after a
  // STOP_WAITING when the keys arrived in the meantime (try_complete).
  void cancel_head_wait(bool suspend);

  // The oldest operation in flight: the next reply is its.
  operation& head() { return flight_.front(); }
  bool head_is(std::uint64_t id) const { return !flight_.empty() && flight_.front().id == id; }

  // Writes bytes on behalf of the head operation `id`; once written, its
  // timer runs and its reply may be read.
  void send_for_head(const std::string& bytes, std::uint64_t id, const char* what);

  // A timeout acts only on the operation that armed it: the timer drops
  // an expiry of an earlier arming (generation_timer: completing or
  // closing disarms, and re-arming after CANCEL_WAIT replaces the first
  // arming), and the handler carries the operation's id, so it does
  // nothing unless that is still the head in flight.
  void arm_timer();

  void disarm_timer() { timer_.cancel(); }

  void on_timeout(std::uint64_t id);

  // What a complete reply means to the operation's caller.
  static store_result to_result(const operation& o, wire::reply r);

  std::exception_ptr wait_timeout_error(const operation& o) const;

  // --- reading ----------------------------------------------------------

  // One read is always outstanding while connected, so a closed connection
  // is noticed when it happens, even with nothing in flight.
  void read_loop();

  void try_complete();

  // --- failure ----------------------------------------------------------

  // What an operation on a closed connection fails with.
  std::exception_ptr closed_error() const;

  void lost(const char* what, const boost::system::error_code& ec);

  void fail_all(std::exception_ptr error) { close_with(std::move(error)); }

  void close_with(std::exception_ptr error);

  boost::asio::io_context& io_;
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
  // close() by the owner, not a lost connection: what fails after it is
  // store_closed_error (kind closed), which nobody needs to hear about.
  bool closed_here_ = false;
  bool connect_started_ = false;
  bool hello_answered_ = false;
  std::exception_ptr hello_error_;
  bool attempt_expired_ = false;  // the current connection attempt ran out of time
  std::uint64_t last_id_ = 0;
};

}  // namespace dtrun::rendezvous
