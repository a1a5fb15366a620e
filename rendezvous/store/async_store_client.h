// A store client for code that lives on an event loop (the agent): every
// operation starts at once and completes later through a callback on the
// same io_context, so the loop never blocks, even when this node hosts the
// store server on that very loop.
//
// Requests go out in call order. One called on an idle connection is
// written at once; those called while others are in flight go out
// together, in one write, once those are answered (the server answers in
// order). A WAIT ends such a batch: the protocol answers it whenever its
// keys appear, so a request sent behind it could be answered first and
// the replies could not be matched. Code that must keep talking while it
// waits takes a watch lane (watch_lane()): a second queue on the same
// connection, whose WAIT gives way to the first queue's work (CANCEL_WAIT
// and that work in one write, then the WAIT again): one connection per
// agent, which is what lets one store serve 10,000 nodes.
//
// Every callback runs exactly once, from the loop. A timeout acts only on
// the operation that armed it (docs/rendezvous.md, Timers); timeouts are
// clamped to [0, no_timeout].
//
// A lost connection fails the operation in flight and every queued one
// with store_connection_error; the client does not reconnect by itself
// (the caller knows whether replaying is safe).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store.h"
#include "rendezvous/store/tcp_store_client.h"

namespace dtrun::rendezvous {

class async_store_client final : public round_store,
                                 public std::enable_shared_from_this<async_store_client> {
 public:
  // Options as for the blocking client (dialect, key prefix, timeouts).
  static std::shared_ptr<async_store_client> create(boost::asio::io_context& io,
                                                    tcp_store_client_options options);
  ~async_store_client() override;

  // A second client on this one's connection, for waits that must not hold
  // up this client's operations (an agent watching its round's `over` key
  // while it sends heartbeats). Its operations keep their own call order;
  // while one of its WAITs is in flight and this client has work, the WAIT
  // is cancelled and sent again afterwards with the rest of its timeout, so
  // its keys may be noticed, and its timeout reported, up to one of this
  // client's operations late. Connect each client once; closing either
  // closes the connection (this client's destructor too, not the lane's).
  // Needs a v2 server (CANCEL_WAIT): store_error otherwise.
  std::shared_ptr<async_store_client> watch_lane();

  // Connects, retrying with backoff and jitter until connect_timeout (an
  // attempt that gets no answer ends then too), then validates (v2).
  // Operations called before it completes are queued. Call it once: a
  // second call, or one after close(), completes (from the loop) with
  // store_connection_error.
  void connect(store_callback done) override;

  void set(std::string key, std::string value, store_callback done) override;
  // Waits up to `timeout` for the key, then reads it: result.value.
  void get(std::string key, store_duration timeout, store_callback done) override;
  void add(std::string key, std::int64_t delta, store_callback done) override;  // result.number
  void compare_set(std::string key, std::string expected, std::string desired,
                   store_callback done) override;                                 // result.value
  void check(std::vector<std::string> keys, store_callback done) override;       // result.flag
  // store_timeout when the keys do not all exist within `timeout`.
  void wait(std::vector<std::string> keys, store_duration timeout, store_callback done) override;
  void delete_key(std::string key, store_callback done) override;                // result.flag
  void num_keys(store_callback done);                                   // result.number
  // Waits up to `timeout` for all keys, then reads them: result.values.
  void multi_get(std::vector<std::string> keys, store_duration timeout, store_callback done) override;
  void multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                 store_callback done) override;
  // MULTI_GET without a WAIT (a 2.x server reads absent keys as empty).
  void read_now(std::vector<std::string> keys, store_callback done) override;

  // dtrun's store extension (store_session.h, will_key_prefix): the
  // server sets `target` when this connection closes with the will set.
  // `will` must start with "dtrun/will/".
  void set_will(std::string will, std::string target, std::string value,
                store_callback done) override;
  void withdraw_will(std::string will, store_callback done) override;

  // Fails everything queued with store_connection_error and closes.
  void close() override;

  // The local address of the connection once connected (what the server
  // sees as us), for agents advertising a reachable address.
  std::string local_address() const override;

  class impl;

 private:
  async_store_client(std::shared_ptr<impl> p, int lane);
  std::shared_ptr<impl> impl_;  // shared: its pending handlers keep it alive
  int lane_ = 0;                // which of the connection's queues this client uses
  bool connect_called_ = false;
};

}  // namespace dtrun::rendezvous
