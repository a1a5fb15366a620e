// An environment as plain data: variable name to value. The launcher reads
// the user's into one, the agent builds each worker's from it.
#pragma once

#include <map>
#include <string>

namespace dtrun {

using env_map = std::map<std::string, std::string>;

}  // namespace dtrun
