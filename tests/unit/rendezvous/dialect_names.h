// Short names for the two wire dialects, as the store tests write them.
#pragma once

#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous::testing {

inline constexpr auto v1 = wire::dialect::v1_13;
inline constexpr auto v2 = wire::dialect::v2;

}  // namespace dtrun::rendezvous::testing
