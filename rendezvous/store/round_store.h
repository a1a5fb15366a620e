// What the rendezvous' round logic needs from a key-value store, as
// asynchronous calls on the agent's event loop. Two backends implement it:
// async_store_client (a c10d TCPStore, hosted by the endpoint's node) and
// etcd_round_store (an etcd v3 cluster, no special node). Because the
// round logic (dynamic_rendezvous) only sees this interface, both backends
// run one rendezvous algorithm; docs/rendezvous.md describes it.
//
// The contract every implementation keeps:
//  - operations of one client apply in call order, one at a time (a WAIT
//    holds up the ones behind it; code that must talk while it waits opens
//    a second client);
//  - every callback runs exactly once, from the loop;
//  - ADD is applied exactly once, even when a connection drops after the
//    request went out (the etcd backend checks before it retries).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/store/store.h"

namespace dtrun::rendezvous {

// What kind of failure a store_result carries, for handlers to switch on
// (instead of rethrowing `error` to learn its class). Each kind is one
// class of store.h: store_timeout, store_wait_timeout, store_connection_error,
// store_corrupt_reply; any other exception is `other`.
enum class store_error_kind {
  none,             // no error
  timeout,          // the store stopped answering in time (store_timeout)
  wait_timeout,     // a WAIT's own deadline passed; the store answered
  connection_lost,  // the connection could not be made or was lost
  session_lost,     // the store dropped this client's session (etcd: its lease)
  closed,           // this side closed the client; pending requests dropped
  corrupt_reply,    // the store answered something that is not a reply
  other,            // any other store_error (a value that is not a number...)
};

// The kind of `error`: none for null. Backends call it once, where they
// make a failed result (store_result::failed / fail).
store_error_kind kind_of(const std::exception_ptr& error);

// "timeout", "wait timeout", "connection lost", ... for log lines.
const char* describe(store_error_kind kind);

// The message of `error` (what()), or "unknown error" for an exception
// that is not a std::exception; empty for null.
std::string error_message(const std::exception_ptr& error);

// What an operation produced. `error` is null on success; which other
// field is set depends on the operation (see each method). `kind` says
// what `error` is; producers set the two together, through failed() or
// fail(). `error` stays for its message and for callers that hand it on.
struct store_result {
  std::exception_ptr error;
  store_error_kind kind = store_error_kind::none;
  std::string value;                // get, compare_set
  std::int64_t number = 0;          // add, num_keys
  bool flag = false;                // check, delete_key
  std::vector<std::string> values;  // multi_get

  // A result that failed with `error`, its kind set.
  static store_result failed(std::exception_ptr error) {
    store_result r;
    r.fail(std::move(error));
    return r;
  }
  // Marks this result failed with `error` (null: succeeded), its kind set.
  void fail(std::exception_ptr e) {
    kind = kind_of(e);
    error = std::move(e);
  }
  // error_message(error).
  std::string message() const { return error_message(error); }
};
using store_callback = std::function<void(store_result)>;

// The callback of a write nobody waits for (a status, a will withdrawn on
// the way out, a reason the round ended). A failure is logged once per
// what and kind, so a store that died does not flood the log with every
// write that followed: "could not <what>: <message>". Copies share what
// they have logged; the callbacks they make may outlive them. Like every
// store callback, they run on the one loop of their clients.
class unheeded_writes {
 public:
  explicit unheeded_writes(std::function<void(const std::string&)> log);

  // The callback for one write; `what` names it ("withdraw the will of
  // node 3"), so keep it free of per-call details (round numbers) to log
  // a repeated failure once.
  store_callback operator()(std::string what) const;

  // From now on failures are not logged, until resume(): the owner has
  // reported a failure of its own (or shut down), which is the last word;
  // a write of that round failing after it would only add noise below it.
  void silence() const;
  void resume() const;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

class round_store {
 public:
  virtual ~round_store() = default;

  // Connects; operations called before it completes are queued. Call once.
  virtual void connect(store_callback done) = 0;

  virtual void set(std::string key, std::string value, store_callback done) = 0;
  // Many sets in as few requests as the store allows (one for c10d): how
  // the closer of a 10,000-node round hands out its assignments.
  virtual void multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                         store_callback done) = 0;
  // Waits up to `timeout` for the key, then reads it: result.value.
  virtual void get(std::string key, store_duration timeout, store_callback done) = 0;
  // Counters are read through ADD 0 only, and counted by 0 or 1: the etcd
  // backend counts puts (a key's version), which needs no retry loop when
  // many nodes count at once; its counters' values are not numbers.
  virtual void add(std::string key, std::int64_t delta, store_callback done) = 0;  // .number
  // PyTorch's compare_set (store.h): result.value.
  virtual void compare_set(std::string key, std::string expected, std::string desired,
                           store_callback done) = 0;
  virtual void check(std::vector<std::string> keys, store_callback done) = 0;  // .flag
  // store_timeout when the keys do not all exist within `timeout`.
  virtual void wait(std::vector<std::string> keys, store_duration timeout,
                    store_callback done) = 0;
  virtual void delete_key(std::string key, store_callback done) = 0;  // .flag
  // Waits up to `timeout` for all keys, then reads them: result.values.
  virtual void multi_get(std::vector<std::string> keys, store_duration timeout,
                         store_callback done) = 0;
  // Reads the keys as they are now, without waiting; an absent key reads
  // as empty: result.values. One request where a WAIT and a GET would be
  // two (a key known to exist, or one whose absence is an answer).
  virtual void read_now(std::vector<std::string> keys, store_callback done) = 0;

  // A last will: when this client's agent dies (its connection closes, or
  // its etcd lease expires) while the will stands, `target` is set to
  // `value`, only while `target` is empty or absent (the first reason
  // wins; on etcd a put only if the key was never created). `will` names the
  // will; set_will again or withdraw_will replaces or withdraws it.
  // Leaving on purpose withdraws it first.
  virtual void set_will(std::string will, std::string target, std::string value,
                        store_callback done) = 0;
  virtual void withdraw_will(std::string will, store_callback done) = 0;

  // The job is over: drop every key under `prefix`. A store that a node
  // hosts dies with it, so by default this does nothing (and completes at
  // once, inline); an external one (etcd) outlives the job and deletes.
  virtual void release(std::string prefix, store_callback done) {
    (void)prefix;
    done({});
  }

  // The job never started: drop every key under `prefixes`, but only if,
  // at once, `counter` counts exactly `count` and `unset` does not exist
  // (nobody joined since, nobody closed the round). result.flag: dropped.
  // By default nothing (inline): a store that a node hosts dies with it.
  virtual void release_unstarted(std::vector<std::string> prefixes, std::string counter,
                                 std::int64_t count, std::string unset, store_callback done) {
    (void)prefixes;
    (void)counter;
    (void)count;
    (void)unset;
    done({});
  }

  // Fails everything queued with store_connection_error and closes.
  virtual void close() = 0;

  // The local address of the connection once connected (what the store
  // sees as us), for agents advertising a reachable address.
  virtual std::string local_address() const = 0;
};

// Opens a client of the rendezvous' store; `connect_timeout` bounds how
// long connect() keeps trying.
using round_store_factory =
    std::function<std::shared_ptr<round_store>(std::chrono::milliseconds connect_timeout)>;

}  // namespace dtrun::rendezvous
