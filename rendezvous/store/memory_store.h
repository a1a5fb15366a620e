// An in-process store with the same semantics as the TCP server, for tests
// and for code that wants a store without a socket. Thread-safe; blocking
// calls wait on a condition variable, not by polling.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/store/store.h"

namespace dtrun::rendezvous {

class memory_store final : public store {
 public:
  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, store_duration timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;

 private:
  bool has_all(const std::vector<std::string>& keys) const;  // needs mutex_
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   store_duration timeout);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace dtrun::rendezvous
