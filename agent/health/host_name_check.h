// Whether the other nodes can reach this node's gloo workers by this
// host's name. torch's gloo (ProcessGroupGloo's default device) binds each
// rank to the address its host name resolves to, and falls back to
// loopback when the name resolves to nothing; either way a rank on another
// node then connects to 127.x and every rank fails deep inside
// init_process_group with "connect [127.0.0.1]: Connection refused". A
// Debian machine maps its own name to 127.0.1.1 in /etc/hosts by default.
// The agent checks once, when a round first spans several nodes over a
// store that is not on loopback, and says so in one line before the
// workers fail.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>

#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

// The warning for `host` whose addresses are `resolved` (empty: the name
// does not resolve), or "" when one of them is not a loopback address.
std::string loopback_host_warning(std::string_view host,
                                  const std::vector<boost::asio::ip::address>& resolved);

// Whether the check applies: several nodes, a store reached off loopback
// (nodes on one machine share loopback), and the workers not told an
// interface (GLOO_SOCKET_IFNAME makes gloo bind to that instead).
bool host_name_check_applies(int nodes, std::string_view store_host, const env_map& worker_env);

// Resolves this machine's name on `io` (Asio's resolver: the lookup does
// not hold up the loop) and calls `warn(line)` when
// loopback_host_warning() has something to say.
void check_host_name(boost::asio::io_context& io, std::function<void(std::string)> warn);

}  // namespace dtrun::agent
