#include "rendezvous/store/memory_store.h"

#include <fmt/format.h>

#include "rendezvous/store/store_semantics.h"

namespace dtrun::rendezvous {
void memory_store::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mutex_);
  values_.insert_or_assign(std::string(key), std::string(value));
  changed_.notify_all();
}

std::string memory_store::get(std::string_view key) {
  std::unique_lock lock(mutex_);
  std::vector<std::string> keys{std::string(key)};
  wait_locked(lock, keys, timeout());
  return values_.find(key)->second;
}

std::int64_t memory_store::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(key);
  auto sum = add_to_counter(it == values_.end() ? nullptr : &it->second, delta);
  if (!sum) {
    throw store_error(fmt::format("add: the value of key '{}' is not a number", key));
  }
  values_.insert_or_assign(std::string(key), std::to_string(*sum));
  changed_.notify_all();
  return *sum;
}

std::string memory_store::compare_set(std::string_view key, std::string_view expected,
                                      std::string_view desired) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(key);
  auto outcome = decide_compare_set(it == values_.end() ? nullptr : &it->second, expected, desired);
  if (outcome.store_desired) {
    values_.insert_or_assign(std::string(key), std::string(desired));
    changed_.notify_all();
  }
  return outcome.reply;
}

bool memory_store::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  return has_all(keys);
}

void memory_store::wait(const std::vector<std::string>& keys, store_duration timeout) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout);
}

bool memory_store::delete_key(std::string_view key) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  values_.erase(it);
  return true;
}

std::int64_t memory_store::num_keys() {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(values_.size());
}

void memory_store::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mutex_);
  values_[std::string(key)].append(value);
  changed_.notify_all();
}

std::vector<std::string> memory_store::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout());
  std::vector<std::string> result;
  result.reserve(keys.size());
  for (const auto& k : keys) result.push_back(values_.find(k)->second);
  return result;
}

void memory_store::multi_set(const std::vector<std::string>& keys,
                             const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw store_error("multi_set: the number of keys and values differ");
  }
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < keys.size(); ++i) values_.insert_or_assign(keys[i], values[i]);
  changed_.notify_all();
}

bool memory_store::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (values_.find(k) == values_.end()) return false;
  }
  return true;
}

void memory_store::wait_locked(std::unique_lock<std::mutex>& lock,
                               const std::vector<std::string>& keys, store_duration timeout) {
  if (!changed_.wait_for(lock, timeout, [&] { return has_all(keys); })) {
    throw store_wait_timeout(fmt::format("timed out after {} ms waiting for key(s) {}",
                                    timeout.count(), quoted_keys(keys)));
  }
}

}  // namespace dtrun::rendezvous
