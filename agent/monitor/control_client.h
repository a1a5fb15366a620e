// The client side of the control socket (control_socket.h), for the
// `dtrun status` and `dtrun stacks` commands: find this user's running
// agents and ask one of them. Blocking; not for the agent's event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

struct agent_endpoint {
  pid_t pid = 0;
  std::string path;  // the socket
};

// The agents with a socket in `dir`, by pid. A socket nobody accepts on
// (its agent died without removing it) is removed when it is ours and
// left out either way. Other files are ignored.
std::vector<agent_endpoint> find_agents_in(const std::string& dir);

// The same in this user's control directory (control_dir.h), without
// creating it: empty when it does not exist or is unsafe.
std::vector<agent_endpoint> find_local_agents();

// Sends `request` as one line and returns the reply line parsed. Throws
// std::runtime_error (one line naming the socket) on connect failure,
// timeout (one deadline for the whole exchange), a reply over 16 MiB or
// one that is not a JSON object.
nlohmann::json ask_agent(const std::string& path, const nlohmann::json& request,
                         std::chrono::milliseconds timeout);

}  // namespace dtrun::agent
