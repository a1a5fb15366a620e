// Namespaces every key of a base store under "<prefix>/", like PyTorch's
// PrefixStore, so one server can hold many runs and rounds side by side.
// num_keys() counts the whole base store, as PyTorch's does.
#pragma once

#include <memory>

#include "rendezvous/store/store.h"

namespace dtrun::rendezvous {

class prefix_store final : public store {
 public:
  prefix_store(std::string prefix, std::shared_ptr<store> base);

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

  const std::string& prefix() const { return prefix_; }

 private:
  std::string full(std::string_view key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<store> base_;
};

}  // namespace dtrun::rendezvous
