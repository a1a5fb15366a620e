// The accept loop of a listening socket: accept, hand the connection over,
// accept again; after a failed accept, say so and try again after a pause;
// stop when told. The agent's control socket, its metrics server and the
// store server share it (any Asio stream protocol: local or TCP).
//
// A failed accept (EMFILE, ENFILE, ENOBUFS) leaves the connection queued,
// so accepting again at once would fail at once: a busy loop, and a line
// each time. Hence the pause.
//
// One thread: the loop, its acceptor and its callbacks belong to one
// io_context's loop. After stop() or the destructor no callback runs,
// even one whose completion was already queued.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include "rendezvous/base/generation_timer.h"

namespace dtrun {

template <typename Protocol>
class accept_loop {
 public:
  using acceptor_type = typename Protocol::acceptor;
  using socket_type = typename Protocol::socket;
  // A new connection; the callee owns it (closing it refuses it).
  using accepted_fn = std::function<void(socket_type)>;
  // A failed accept, before the pause.
  using failed_fn = std::function<void(const boost::system::error_code&)>;

  accept_loop(boost::asio::io_context& io, std::chrono::milliseconds retry_delay)
      : shared_(std::make_shared<shared>(io, retry_delay)) {}
  accept_loop(const accept_loop&) = delete;
  accept_loop& operator=(const accept_loop&) = delete;
  ~accept_loop() { stop(); }

  // The acceptor, for the caller to open, bind and listen before start().
  acceptor_type& acceptor() { return shared_->acceptor; }

  // Accepts until stop(): each connection goes to `accepted`, each failed
  // accept to `failed` (then the next try waits retry_delay). Call once.
  void start(accepted_fn accepted, failed_fn failed) {
    shared_->accepted = std::move(accepted);
    shared_->failed = std::move(failed);
    accept(shared_);
  }

  // Closes the acceptor and cancels a pending retry; no callback runs
  // after this. Harmless twice.
  void stop() {
    shared_->stopped = true;
    boost::system::error_code ignored;
    shared_->acceptor.close(ignored);
    shared_->retry.cancel();
  }

 private:
  struct shared {
    shared(boost::asio::io_context& io, std::chrono::milliseconds delay)
        : acceptor(io), retry(io), retry_delay(delay) {}
    acceptor_type acceptor;
    generation_timer retry;
    std::chrono::milliseconds retry_delay;
    accepted_fn accepted;
    failed_fn failed;
    bool stopped = false;
  };

  static void accept(const std::shared_ptr<shared>& s) {
    s->acceptor.async_accept([weak = std::weak_ptr<shared>(s)](boost::system::error_code ec,
                                                               socket_type socket) {
      auto st = weak.lock();
      if (!st || st->stopped || ec == boost::asio::error::operation_aborted) return;
      if (ec) {
        st->failed(ec);
        st->retry.arm_after(st->retry_delay, [weak] {
          auto again = weak.lock();
          if (again && !again->stopped) accept(again);
        });
        return;
      }
      st->accepted(std::move(socket));
      if (!st->stopped) accept(st);
    });
  }

  std::shared_ptr<shared> shared_;
};

}  // namespace dtrun
