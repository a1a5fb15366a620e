// Wall-clock time as seconds since the epoch, the unit of the timestamps
// dtrun writes for people and other programs (event log, status, file
// timers); durations use steady_clock instead.
#pragma once

#include <chrono>

namespace dtrun::agent {

inline double seconds_since_epoch(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

inline double wall_clock_seconds() { return seconds_since_epoch(std::chrono::system_clock::now()); }

}  // namespace dtrun::agent
