// Wall-clock time as seconds since the epoch, the unit of the timestamps
// dtrun writes for people and other programs (event log, status, file
// timers); durations use steady_clock instead.
#pragma once

#include <chrono>

namespace dtrun::agent {

inline double wall_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace dtrun::agent
