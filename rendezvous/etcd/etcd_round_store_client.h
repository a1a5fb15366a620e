// The etcd client behind etcd_round_store_factory (etcd_round_store.h),
// one file per job:
//   etcd_round_store.cpp        the queue, etcd calls with retries, connect
//   etcd_round_store_ops.cpp    SET, GET, WAIT, CHECK, DELETE, COMPARE_SET,
//                               release
//   etcd_round_store_add.cpp    ADD: counters as etcd versions, exactly once
//   etcd_round_store_wait.cpp   which keys are missing, watches until they
//                               are put, batched reads
//   etcd_round_store_wills.cpp  last wills
// Internal to rendezvous/etcd.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_options.h"
#include "rendezvous/etcd/etcd_parse.h"
#include "rendezvous/etcd/etcd_session.h"
#include "rendezvous/etcd/etcd_watch.h"
#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store.h"

namespace dtrun::rendezvous::etcd_client {

using clock_type = std::chrono::steady_clock;

// etcd's default --max-txn-ops is 128; ranges go in batches below it.
inline constexpr std::size_t txn_batch = 64;

// The first key after every key that starts with `prefix`.
std::string prefix_end(std::string prefix);

nlohmann::json range_request(const std::string& key, bool count_only);

// A txn of range requests for keys[from, end).
nlohmann::json range_txn(const std::vector<std::string>& keys, std::size_t from, std::size_t end,
                         bool count_only);

// The agent's lease was lost (store_session_lost): a new one may be taken.
std::exception_ptr session_lost_error(const std::string& message);
std::exception_ptr connection_error(const std::string& message);
// close() or the destructor: requests still pending are dropped.
std::exception_ptr closed_here();

// A result that failed with connection_error(message).
store_result connection_failure(const std::string& message);

// "" when `r` is a txn reply that parses into `txn`, else why not.
std::string txn_problem(const etcd_reply& r, etcd_txn& txn);

// The range of the txn's `at`th response, if it has one.
const etcd_range* response_range(const etcd_txn& txn, std::size_t at);

class etcd_round_store final : public round_store,
                               public std::enable_shared_from_this<etcd_round_store> {
 public:
  using finish = std::function<void(store_result)>;

  etcd_round_store(boost::asio::io_context& io, std::shared_ptr<etcd_session> session,
                   std::chrono::milliseconds connect_timeout, std::uint64_t number);
  ~etcd_round_store() override;

  void connect(store_callback done) override;
  void set(std::string key, std::string value, store_callback done) override;
  void multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                 store_callback done) override;
  void get(std::string key, store_duration timeout, store_callback done) override;
  void wait(std::vector<std::string> keys, store_duration timeout, store_callback done) override;
  void check(std::vector<std::string> keys, store_callback done) override;
  void multi_get(std::vector<std::string> keys, store_duration timeout,
                 store_callback done) override;
  void read_now(std::vector<std::string> keys, store_callback done) override;
  void delete_key(std::string key, store_callback done) override;
  void compare_set(std::string key, std::string expected, std::string desired,
                   store_callback done) override;
  void add(std::string key, std::int64_t delta, store_callback done) override;
  void set_will(std::string will, std::string target, std::string value,
                store_callback done) override;
  void withdraw_will(std::string will, store_callback done) override;
  void release(std::string prefix, store_callback done) override;
  void release_unstarted(std::vector<std::string> prefixes, std::string counter,
                         std::int64_t count, std::string unset, store_callback done) override;
  void close() override;
  std::string local_address() const override;

 private:
  struct queued {
    std::function<void(finish)> start;
    store_callback done;
  };

  // Which of `keys` (from index `from`) do not exist; also the revision
  // the answer holds at, for a watch that must not miss what follows.
  using missing_callback =
      std::function<void(store_result, std::vector<std::string>, std::int64_t revision)>;

  // What read() does with a key that is not there.
  static constexpr bool absent_reads_empty = true;

  // --- the queue: one operation at a time, in call order (etcd_round_store.cpp)
  void enqueue(std::function<void(finish)> start, store_callback done);
  void run_next();
  void fail_queued(std::exception_ptr error);
  void shut(std::exception_ptr error);

  // --- etcd calls (etcd_round_store.cpp)
  // POSTs, retrying on another member while the reply says it is worth it
  // and `may_repeat` allows it (a request that may have been applied is
  // repeated only when applying it twice is harmless).
  void call(std::string path, nlohmann::json body, bool may_repeat,
            clock_type::time_point deadline, std::function<void(etcd_reply)> then);
  void attempt(std::string path, std::string text, bool may_repeat,
               clock_type::time_point deadline, std::function<void(etcd_reply)> then);
  clock_type::time_point request_deadline() const;
  std::string full(const std::string& key) const;
  std::vector<std::string> full(std::vector<std::string> keys) const;

  // --- writes (etcd_round_store_ops.cpp)
  void put_batches(std::vector<std::string> keys, std::vector<std::string> values,
                   std::size_t from, finish f);
  void put(const std::string& key, const std::string& value, bool agent_lease, finish f);
  void delete_range(nlohmann::json body, std::function<void(store_result, std::int64_t)> then);

  // --- ADD (etcd_round_store_add.cpp)
  void count_of(const std::string& key, std::int64_t revision, finish f);
  void increment(const std::string& key, const std::string& stamp,
                 clock_type::time_point deadline, finish f);
  void confirm_increment(const std::string& key, const std::string& stamp,
                         const std::string& marker, clock_type::time_point deadline, finish f);
  std::string marker_key() const;

  // --- waiting and reading (etcd_round_store_wait.cpp)
  void missing(std::vector<std::string> keys, std::size_t from, std::vector<std::string> absent,
               std::int64_t revision, missing_callback done);
  void await(std::vector<std::string> keys, store_duration timeout, finish f);
  void await_until(std::vector<std::string> keys, store_duration timeout,
                   clock_type::time_point deadline, finish f);
  void watch_for(std::vector<std::string> absent, std::int64_t from_revision,
                 store_duration timeout, clock_type::time_point deadline, finish f);
  // The values of `keys` (which exist, unless `absent_ok`), in order.
  void read(std::vector<std::string> keys, finish f, std::size_t from = 0,
            std::vector<std::string> values = {}, bool absent_ok = false);

  // --- last wills (etcd_round_store_wills.cpp)
  void watch_wills(const std::string& dir);
  void execute_will(const std::string& target, const std::string& value);

  boost::asio::io_context& io_;
  std::shared_ptr<etcd_session> session_;
  etcd_options options_;
  std::shared_ptr<etcd_connection> connection_;
  boost::asio::steady_timer retry_;
  std::chrono::milliseconds connect_timeout_;
  std::uint64_t number_;
  std::string lease_, job_lease_;
  std::deque<queued> queue_;
  finish cancel_current_;
  std::vector<std::shared_ptr<etcd_watch>> watches_;
  std::vector<std::shared_ptr<boost::asio::steady_timer>> wait_timers_;
  std::set<std::string> will_dirs_;
  std::string lost_;
  bool session_lost_ = false;  // shut because the agent's lease was lost
  std::uint64_t listener_ = 0;
  std::uint64_t add_seq_ = 0;
  std::uint64_t op_generation_ = 0;
  bool connected_ = false, busy_ = false, closed_ = false;
};

}  // namespace dtrun::rendezvous::etcd_client
