// The key-value store every dtrun component talks to.
//
// One small interface with three implementations: tcp_store_client (the
// real thing, speaking PyTorch's TCPStore protocol), memory_store (tests
// and in-process use) and prefix_store (a decorator that namespaces keys).
// Keys and values are byte strings; std::string carries arbitrary bytes.
//
// Thread safety: memory_store is thread-safe; tcp_store_client is not (one
// connection, one request at a time); prefix_store inherits from its base.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::rendezvous {

// Expected failures of store operations; what() is a one-line message a
// user can act on.
class store_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The store's port is taken by another process (store_server).
class store_address_in_use : public store_error {
 public:
  using store_error::store_error;
};

// A blocking call (get, wait, multi_get, connect) ran out of time. The
// message names the keys or endpoint and how long we waited.
class store_timeout : public store_error {
 public:
  using store_error::store_error;
};

// A store_error carrying `message`, for the callbacks of asynchronous calls.
std::exception_ptr store_error_ptr(const std::string& message);

// Keys as timeout messages name them: 'a', 'b'.
std::string quoted_keys(const std::vector<std::string>& keys);

// A WAIT's own deadline passed: its keys did not appear in time (the
// store answered everything else). Not a store that stopped answering,
// which is a plain store_timeout: a rendezvous reports the two differently.
class store_wait_timeout : public store_timeout {
 public:
  using store_timeout::store_timeout;
};

// The connection to a store server could not be made or was lost.
class store_connection_error : public store_error {
 public:
  using store_error::store_error;
};

// The store dropped this client's session, through no fault of the
// request: on etcd, the agent's lease expired (the agent stopped, or was
// cut off, for longer than lease_ttl) and took the keys written under it.
// The connection may be fine; a new session (lease) can be taken.
class store_session_lost : public store_connection_error {
 public:
  using store_connection_error::store_connection_error;
};

// This side closed the client (a round's end, a shutdown): what was still
// pending is dropped. Not the store's failure, so nobody needs telling.
class store_closed_error : public store_connection_error {
 public:
  using store_connection_error::store_connection_error;
};

// The store answered something that is not a valid reply (a bad frame, a
// reply to another request): the connection cannot be trusted further.
class store_corrupt_reply : public store_error {
 public:
  using store_error::store_error;
};

using store_clock = std::chrono::steady_clock;
using store_duration = std::chrono::milliseconds;

// A duration long enough to mean "wait forever" without overflowing when
// added to steady_clock::now().
inline constexpr store_duration no_timeout = std::chrono::hours(24 * 365 * 100);

class store {
 public:
  virtual ~store() = default;

  // Creates or replaces `key`. Wakes every waiter on `key`.
  virtual void set(std::string_view key, std::string_view value) = 0;

  // Returns the value of `key`, waiting up to timeout() for it to exist.
  // Throws store_timeout naming the key when it does not appear in time.
  virtual std::string get(std::string_view key) = 0;

  // Adds `delta` to the decimal integer stored at `key` (a missing key
  // counts as 0) and returns the new value. Throws store_error when the
  // stored value is not a number.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;

  // PyTorch's compare_set, exactly:
  //  - key missing and `expected` empty: store `desired`, return it;
  //  - key missing and `expected` non-empty: store nothing, return `expected`;
  //  - key present and equal to `expected`: store `desired`, return it;
  //  - key present and different: return the current value.
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;

  // True when every key exists. Never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists or `timeout` passes (store_timeout).
  virtual void wait(const std::vector<std::string>& keys, store_duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Removes `key`; true when it existed. Does not wake waiters.
  virtual bool delete_key(std::string_view key) = 0;

  // Number of keys in the whole store (every prefix, like PyTorch).
  virtual std::int64_t num_keys() = 0;

  // Appends `value` to `key`, creating it when missing. Wakes waiters.
  virtual void append(std::string_view key, std::string_view value) = 0;

  // Waits (timeout()) for all keys, then returns their values in order.
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;

  // Sets each keys[i] to values[i]; the sizes must match.
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) = 0;

  // The timeout that get(), wait(keys) and multi_get() use.
  store_duration timeout() const { return timeout_; }
  void set_timeout(store_duration t) { timeout_ = t; }

 private:
  store_duration timeout_ = std::chrono::minutes(5);
};

}  // namespace dtrun::rendezvous
