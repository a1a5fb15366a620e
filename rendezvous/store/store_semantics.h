// The value rules PyTorch's TCPStore servers apply, as pure functions, so
// the TCP server and the in-memory store cannot drift apart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::rendezvous {

struct compare_set_outcome {
  bool store_desired = false;  // write `desired` under the key
  std::string reply;           // what the caller gets back
};

// PyTorch's compare_set. `current` is null when the key is missing.
compare_set_outcome decide_compare_set(const std::string* current, std::string_view expected,
                                       std::string_view desired);

// The new counter value for ADD: a missing key counts as 0; an existing
// value is read like std::stoll (leading blanks, sign, digits; trailing
// bytes ignored). nullopt when the value is not a number or the sum
// overflows: the caller reports an error instead of guessing.
std::optional<std::int64_t> add_to_counter(const std::string* current, std::int64_t delta);

}  // namespace dtrun::rendezvous
