// Numbers from the command line, PET_* variables and --rdzv-conf, checked
// in one place so every flag refuses the same bad input the same way: a
// whole token (blanks around it are dropped, as Python's int()/float()
// do), decimal only (no "0x10", no "5s"), finite ("inf" and "nan" are
// refused), and inside a range that is stated in the error.
//
// Durations are seconds as torchrun takes them ("30", "0.5", "1e3") and
// become std::chrono::milliseconds. The longest one accepted anywhere is
// max_duration_s (10 years): as nanoseconds added to steady_clock::now()
// it stays far from overflow, and nobody means a longer timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrun {

// 10 years of 365 days, in seconds.
inline constexpr double max_duration_s = 10.0 * 365 * 24 * 3600;

// The shortest positive duration: timers run in milliseconds, so anything
// shorter would become 0 and turn a periodic timer into a busy loop.
inline constexpr double min_positive_duration_s = 0.001;

// The ranges of dtrun's counts. Sane, not theoretical: a world of
// max_nnodes x max_nproc_per_node ranks still fits an int.
inline constexpr std::int64_t max_nnodes = 100'000;
inline constexpr std::int64_t max_nproc_per_node = 4'096;
inline constexpr std::int64_t max_restarts_limit = 1'000'000;
inline constexpr std::int64_t max_port = 65'535;

struct duration_limits {
  // Whether 0 means something for this setting (e.g. "SIGKILL at once");
  // without it the least value is min_positive_duration_s.
  bool allow_zero = false;
  double max_s = max_duration_s;
};

// The value of `text` as a whole number in [min, max]. Throws usage_error
// "<name>: '<text>' is not a whole number from <min> to <max>" otherwise
// (also for "1e3", "0x10", "5s", "" and values beyond 64 bits).
std::int64_t parse_integer(std::string_view text, std::string_view name, std::int64_t min,
                           std::int64_t max);

// The value of `text` as a number of seconds within `limits`, rounded to
// the millisecond. Throws usage_error naming `name` and the accepted range
// (for "nan", "inf", "-1", "5s", "", and values beyond limits.max_s).
std::chrono::milliseconds parse_duration_seconds(std::string_view text, std::string_view name,
                                                 duration_limits limits);

// The same check for a number already held as seconds (a double filled by
// CLI11 or a test). Throws usage_error naming `name`.
std::chrono::milliseconds seconds_to_duration(double seconds, std::string_view name,
                                              duration_limits limits);

// "from 0 to 315360000 (10 years)": the accepted range, as errors and
// --help state it.
std::string describe_range(duration_limits limits);

}  // namespace dtrun
