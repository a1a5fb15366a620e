// CPU numbers as Linux writes them in sysfs and /proc ("0-3,8,10-11").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtrun::agent {

// Sorted, distinct CPU numbers -> "0-3,8,10-11" ("" for none). The input
// need not be sorted or distinct.
std::string format_cpu_list(std::vector<int> cpus);

// "0-3,8" -> {0,1,2,3,8}, sorted and distinct; blanks and a trailing
// newline are ignored. Throws std::invalid_argument on anything else.
std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace dtrun::agent
