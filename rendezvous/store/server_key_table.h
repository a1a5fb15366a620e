// The store server's data: keys, queues, and who waits for or watches
// which key. Single-threaded by design (it lives on the server's event
// loop), so it has no locks. Waits are lists per key, woken by the writes
// that can satisfy them; nothing here ever polls.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtrun::rendezvous {

// One WAIT request that is not yet satisfied.
struct pending_wait {
  std::size_t remaining = 0;       // registrations not yet woken
  std::vector<std::string> keys;   // keys it is registered under
  std::function<void()> on_ready;  // called once, when remaining reaches 0
};
using wait_handle = std::shared_ptr<pending_wait>;

// PyTorch 1.13's WATCH_KEY events: (event byte, key, old value, new value).
using watch_callback =
    std::function<void(std::uint8_t, const std::string&, std::string_view, std::string_view)>;

class key_table {
 public:
  // nullptr when missing.
  const std::string* find(const std::string& key) const;

  void set(const std::string& key, std::string value);
  // nullopt when the stored value is not a number (nothing changes).
  std::optional<std::int64_t> add(const std::string& key, std::int64_t delta);
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool erase(const std::string& key);
  void append(const std::string& key, std::string_view value);

  // A key is ready when it holds a value or a non-empty queue.
  bool check(const std::vector<std::string>& keys) const;

  // Registers a wait for every key that is not ready. Returns nullptr when
  // all are ready already (the caller answers at once); otherwise the
  // handle, whose on_ready runs when the last of them is written.
  wait_handle wait(const std::vector<std::string>& keys, std::function<void()> on_ready);
  // Forgets a pending wait (client cancelled or went away). Idempotent.
  void cancel(const wait_handle& handle);
  // cancel() of each handle, visiting each key's waiter list once (a
  // connection closing with many waits on one key must not cost waits
  // squared).
  void cancel(std::span<const wait_handle> handles);

  // BARRIER (torch 2.15): one more arrival at `key`, whose value counts
  // them in decimal as ADD's do (a missing key is 0). The new count is
  // stored without waking anyone; once it reaches `world_size` every
  // waiter on `key` (earlier arrivals, and WAITs on it) wakes and the
  // result is nullptr: the caller answers at once. Below it, the handle of
  // this arrival's wait on `key`, woken by the last arrival or by any write
  // to `key` (a SET, an ADD), as on PyTorch's servers. nullopt when the
  // value is not a number or the count would overflow (nothing changes).
  std::optional<wait_handle> barrier(const std::string& key, std::int64_t world_size,
                                     std::function<void()> on_ready);

  void queue_push(const std::string& key, std::string value);
  // Length before the pop, and the popped value when that was > 0.
  std::pair<std::int64_t, std::optional<std::string>> queue_pop(const std::string& key);
  std::int64_t queue_len(const std::string& key) const;

  std::int64_t size() const { return static_cast<std::int64_t>(values_.size()); }
  // Erases every key (watchers see each deletion) and every queue. Pending
  // waits stay registered: they wait for the keys to be written again.
  void clear();
  std::vector<std::string> list_keys() const;

  // Calls `callback` on every change of `key` until unwatch(id). Safe to
  // call from inside a callback (the new watch sees later changes only).
  std::uint64_t watch(const std::string& key, watch_callback callback);
  // Idempotent; safe from inside a callback (even that watch's own): the
  // callback is not called again.
  void unwatch(std::uint64_t id);
  // unwatch() of every id in `ids`, in one pass over the watchers (a
  // connection closing with many watches must not cost watches squared).
  // `ids` ascending, as watch() hands them out.
  void unwatch(std::span<const std::uint64_t> ids);
  std::size_t watch_count() const;

 private:
  bool ready(const std::string& key) const;
  // Stores `value` under `key` and tells the watchers; wakes nobody.
  void put(const std::string& key, std::string value);
  void wake_all(const std::string& key);
  void wake_one(const std::string& key);
  void notify(std::uint8_t event, const std::string& key, std::string_view old_value,
              std::string_view new_value);

  std::unordered_map<std::string, std::string> values_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<wait_handle>> waiters_;

  struct watcher {
    std::uint64_t id;
    std::string key;
    // Shared so that notify() keeps the one it is calling alive while that
    // call adds or removes watchers; null once unwatched.
    std::shared_ptr<watch_callback> callback;
  };
  std::vector<watcher> watchers_;  // few (1.13 only); a vector is enough
  std::uint64_t next_watch_id_ = 1;
  // notify() calls in progress: unwatch() inside them only marks, and the
  // outermost notify() removes the marked entries afterwards.
  int notifying_ = 0;
};

}  // namespace dtrun::rendezvous
