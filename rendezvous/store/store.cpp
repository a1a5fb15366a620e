#include "rendezvous/store/store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dtrun::rendezvous {

std::exception_ptr store_error_ptr(const std::string& message) {
  return std::make_exception_ptr(store_error(message));
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  return fmt::format("'{}'", fmt::join(keys, "', '"));
}

}  // namespace dtrun::rendezvous
