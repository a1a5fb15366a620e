#include "rendezvous/store/server_key_table.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "rendezvous/store/store_semantics.h"
#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous {

const std::string* key_table::find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

void key_table::put(const std::string& key, std::string value) {
  auto [it, created] = values_.try_emplace(key);
  std::string old = std::exchange(it->second, std::move(value));
  if (!watchers_.empty()) {
    notify(created ? wire::watch_key_created : wire::watch_key_updated, key, old, it->second);
  }
}

void key_table::set(const std::string& key, std::string value) {
  put(key, std::move(value));
  wake_all(key);
}

std::optional<std::int64_t> key_table::add(const std::string& key, std::int64_t delta) {
  auto sum = add_to_counter(find(key), delta);
  if (sum) set(key, std::to_string(*sum));
  return sum;
}

std::string key_table::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  auto outcome = decide_compare_set(find(key), expected, desired);
  // Waking on a successful compare_set is libuv's behaviour; the 1.13
  // classic server forgot to, which left waiters hanging.
  if (outcome.store_desired) set(key, desired);
  return outcome.reply;
}

bool key_table::erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  std::string old = std::move(it->second);
  values_.erase(it);
  if (!watchers_.empty()) notify(wire::watch_key_deleted, key, old, {});
  return true;
}

void key_table::append(const std::string& key, std::string_view value) {
  auto [it, created] = values_.try_emplace(key);
  it->second.append(value);
  if (!watchers_.empty()) {
    notify(created ? wire::watch_key_created : wire::watch_key_updated, key, {}, it->second);
  }
  wake_all(key);
}

bool key_table::ready(const std::string& key) const {
  if (values_.count(key) != 0) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool key_table::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return ready(k); });
}

wait_handle key_table::wait(const std::vector<std::string>& keys,
                            std::function<void()> on_ready) {
  auto handle = std::make_shared<pending_wait>();
  for (const auto& k : keys) {
    if (ready(k)) continue;
    waiters_[k].push_back(handle);
    handle->keys.push_back(k);
    ++handle->remaining;
  }
  if (handle->remaining == 0) return nullptr;
  handle->on_ready = std::move(on_ready);
  return handle;
}

void key_table::cancel(const wait_handle& handle) {
  cancel(std::span<const wait_handle>(&handle, 1));
}

void key_table::cancel(std::span<const wait_handle> handles) {
  // A handle in a waiter list always has remaining > 0, so after zeroing
  // these, remaining == 0 picks out exactly the cancelled ones.
  std::unordered_set<std::string> keys;
  for (const auto& handle : handles) {
    if (!handle) continue;
    keys.insert(handle->keys.begin(), handle->keys.end());
    handle->keys.clear();
    handle->remaining = 0;
    handle->on_ready = nullptr;
  }
  for (const auto& k : keys) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    std::erase_if(it->second, [](const wait_handle& w) { return w->remaining == 0; });
    if (it->second.empty()) waiters_.erase(it);
  }
}

void key_table::wake_all(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto woken = std::move(it->second);
  waiters_.erase(it);
  for (auto& handle : woken) {
    if (handle->remaining > 0 && --handle->remaining == 0 && handle->on_ready) {
      handle->keys.clear();
      std::exchange(handle->on_ready, nullptr)();
    }
  }
}

void key_table::wake_one(const std::string& key) {
  // A pushed item satisfies one waiter; the rest keep waiting for the next.
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto handle = it->second.front();
  it->second.erase(it->second.begin());
  if (it->second.empty()) waiters_.erase(it);
  if (--handle->remaining == 0 && handle->on_ready) {
    handle->keys.clear();
    std::exchange(handle->on_ready, nullptr)();
  }
}

std::optional<wait_handle> key_table::barrier(const std::string& key, std::int64_t world_size,
                                              std::function<void()> on_ready) {
  auto count = add_to_counter(find(key), 1);
  if (!count) return std::nullopt;
  // An arrival that does not complete the barrier must not wake the
  // earlier ones: they wait on a key that already exists.
  put(key, std::to_string(*count));
  if (*count >= world_size) {
    wake_all(key);
    return wait_handle();
  }
  auto handle = std::make_shared<pending_wait>();
  handle->remaining = 1;
  handle->keys.push_back(key);
  handle->on_ready = std::move(on_ready);
  waiters_[key].push_back(handle);
  return handle;
}

void key_table::queue_push(const std::string& key, std::string value) {
  queues_[key].push_back(std::move(value));
  wake_one(key);
}

std::pair<std::int64_t, std::optional<std::string>> key_table::queue_pop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return {0, std::nullopt};
  auto length = static_cast<std::int64_t>(it->second.size());
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return {length, std::move(value)};
}

std::int64_t key_table::queue_len(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

void key_table::clear() {
  queues_.clear();
  if (watchers_.empty()) {
    values_.clear();
    return;
  }
  for (const auto& key : list_keys()) erase(key);
}

std::vector<std::string> key_table::list_keys() const {
  std::vector<std::string> keys;
  keys.reserve(values_.size());
  for (const auto& [k, v] : values_) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::uint64_t key_table::watch(const std::string& key, watch_callback callback) {
  auto id = next_watch_id_++;
  watchers_.push_back({id, key, std::make_shared<watch_callback>(std::move(callback))});
  return id;
}

void key_table::unwatch(std::uint64_t id) { unwatch(std::span<const std::uint64_t>(&id, 1)); }

void key_table::unwatch(std::span<const std::uint64_t> ids) {
  auto listed = [ids](const watcher& w) {
    return std::binary_search(ids.begin(), ids.end(), w.id);
  };
  if (notifying_ > 0) {
    for (auto& w : watchers_) {
      if (listed(w)) w.callback = nullptr;
    }
    return;
  }
  std::erase_if(watchers_, listed);
}

std::size_t key_table::watch_count() const {
  return static_cast<std::size_t>(std::count_if(watchers_.begin(), watchers_.end(),
                                                [](const watcher& w) { return w.callback; }));
}

void key_table::notify(std::uint8_t event, const std::string& key, std::string_view old_value,
                       std::string_view new_value) {
  // By index, over the watchers present at the start: a callback may add
  // (push_back moves the vector) or remove watchers.
  // Callbacks must not write to the table (the views point into it).
  struct depth_guard {
    key_table& table;
    explicit depth_guard(key_table& t) : table(t) { ++table.notifying_; }
    ~depth_guard() {
      if (--table.notifying_ == 0) {
        std::erase_if(table.watchers_, [](const watcher& w) { return !w.callback; });
      }
    }
  } guard(*this);
  const std::size_t n = watchers_.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (watchers_[i].key != key || !watchers_[i].callback) continue;
    auto callback = watchers_[i].callback;
    (*callback)(event, key, old_value, new_value);
  }
}

}  // namespace dtrun::rendezvous
