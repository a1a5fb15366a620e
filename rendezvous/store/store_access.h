// Who may connect to a store dtrun hosts: the policy behind
// store_server_options::admit.
//
// Two rules, each optional:
//  - same user: the client's socket must belong to dtrun's effective uid,
//    looked up in the kernel (peer_credentials.h). A client that cannot be
//    looked up (another machine, netlink unavailable) is refused: the rule
//    fails closed. On by default for the single-node store on loopback.
//  - client networks: the client's address must be in one of the listed
//    networks, or be this machine's own (loopback or one of its interface
//    addresses: the agent and its local workers). For multi-node stores,
//    which listen on every interface.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/network_v6.hpp>

namespace dtrun::rendezvous {

struct client_network {
  // As the user should read it: "10.0.0.0/8", "fd00::/8".
  std::string text;
  // IPv4 networks as IPv4-mapped IPv6 (prefix + 96), so one comparison
  // covers IPv4 clients, IPv6 clients and IPv4 clients of a dual-stack
  // listener alike.
  boost::asio::ip::network_v6 network;
};

// "10.0.0.0/8,192.168.1.0/24,::1/128": CIDR networks, IPv4 or IPv6,
// separated by commas (spaces around them ignored). A bare address is a
// /32 or /128. Throws std::invalid_argument naming the bad entry when one
// is not a network, or has bits set after its prefix ("10.1.0.0/8").
// An empty list gives an empty vector.
std::vector<client_network> parse_client_networks(std::string_view list);

// True when `address` (IPv4, IPv6 or IPv4-mapped) lies in `network`.
bool contains(const client_network& network, const boost::asio::ip::address& address);

struct store_access_options {
  // Admit only sockets owned by this process's effective uid (root's
  // store admits only root).
  bool same_user_only = false;
  // Empty: every address. Otherwise these networks and this machine.
  std::vector<client_network> allowed_networks;
  // How the user turns same_user_only off, named in every refusal it causes.
  std::string same_user_opt_out = "--store-allow-any-user";
  // The option that set allowed_networks, named in its refusals.
  std::string networks_option = "--store-allow-networks";
};

// The admit function for store_server_options: "" admits the accepted
// socket `fd`, anything else is the one-phrase reason it is refused.
// Returns an empty function when neither rule is on (no per-connection
// cost). Runs on the server's event loop; never blocks (one netlink round
// trip per connection for the same-user rule, getifaddrs() only for a
// client outside the allowed networks).
std::function<std::string(int fd)> make_admit(store_access_options options);

// Whether the same-user rule can work on this machine, tried once on a
// private loopback connection: "" when it can (or the rule is off), else
// one line saying why not and naming options.same_user_opt_out. Called at
// startup so that a sandbox without socket diagnostics fails the launch
// with that line instead of refusing every worker. Blocks for one local
// connect (microseconds); call it before the event loop runs.
std::string same_user_rule_unavailable(const store_access_options& options);

}  // namespace dtrun::rendezvous
