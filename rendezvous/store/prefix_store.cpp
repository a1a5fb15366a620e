#include "rendezvous/store/prefix_store.h"

namespace dtrun::rendezvous {

prefix_store::prefix_store(std::string prefix, std::shared_ptr<store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  set_timeout(base_->timeout());
}

std::string prefix_store::full(std::string_view key) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + key.size());
  out.append(prefix_).append("/").append(key);
  return out;
}

std::vector<std::string> prefix_store::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void prefix_store::set(std::string_view key, std::string_view value) {
  base_->set(full(key), value);
}

// Blocking reads use this store's timeout(), which starts as the base's.
std::string prefix_store::get(std::string_view key) {
  auto k = full(key);
  base_->wait({k}, timeout());
  return base_->get(k);
}

std::int64_t prefix_store::add(std::string_view key, std::int64_t delta) {
  return base_->add(full(key), delta);
}

std::string prefix_store::compare_set(std::string_view key, std::string_view expected,
                                      std::string_view desired) {
  return base_->compare_set(full(key), expected, desired);
}

bool prefix_store::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

void prefix_store::wait(const std::vector<std::string>& keys, store_duration timeout) {
  base_->wait(full(keys), timeout);
}

bool prefix_store::delete_key(std::string_view key) { return base_->delete_key(full(key)); }

std::int64_t prefix_store::num_keys() { return base_->num_keys(); }

void prefix_store::append(std::string_view key, std::string_view value) {
  base_->append(full(key), value);
}

std::vector<std::string> prefix_store::multi_get(const std::vector<std::string>& keys) {
  auto ks = full(keys);
  base_->wait(ks, timeout());
  return base_->multi_get(ks);
}

void prefix_store::multi_set(const std::vector<std::string>& keys,
                             const std::vector<std::string>& values) {
  base_->multi_set(full(keys), values);
}

}  // namespace dtrun::rendezvous
