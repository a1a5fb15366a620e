// A node health check's built-in (docs/agent.md "Node health"): the
// node's network links as the kernel shows them in sysfs.
//   - every InfiniBand or RoCE port NCCL may use (NCCL_IB_HCA applied) is
//     ACTIVE (/sys/class/infiniband/DEV/ports/N/state);
//   - its link_downed counter did not rise since the last check (a port
//     that went down and came back: a flapping cable or switch port that
//     a job sees as a stalled collective, and nothing else);
//   - each Ethernet interface NCCL's and gloo's sockets use is up, and its
//     carrier_changes counter did not rise since the last check.
// Which interfaces: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME when set
// (NCCL's rules: a prefix, `=NAME` exact, `^` excludes), else the one
// the kernel routes the rendezvous endpoint through (route_interface():
// the workers' MASTER_ADDR is the same host in a c10d job). Only those:
// a container host's veth and bridge interfaces change carrier all day.
//
// The sysfs root is a parameter, so the tests read a fake tree. Reading
// sysfs never blocks (its files are the kernel's, not a disk's): the
// check runs on the agent's loop. Single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/health/node_health.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

// One InfiniBand or RoCE port.
struct ib_port {
  std::string device;      // "mlx5_0"
  std::string port;        // "1"
  std::string state;       // the state file's text: "4: ACTIVE", "1: DOWN"
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
  std::optional<std::uint64_t> link_downed;  // unknown when unreadable
};

// One Ethernet interface the sockets use.
struct net_link {
  std::string name;
  bool present = false;   // under /sys/class/net
  std::string operstate;  // "up", "down", "unknown", ...
  bool carrier = false;   // the carrier file reads 1
  std::optional<std::uint64_t> carrier_changes;
};

struct nic_snapshot {
  std::vector<ib_port> ports;
  std::vector<net_link> links;
};

// Whether `name` (and `port`, for an HCA list such as "mlx5_0:1") is
// chosen by an NCCL interface list: comma-separated prefixes, `=` before
// the list for exact names, `^` for a list of exclusions. An empty list
// chooses everything.
bool nccl_list_selects(const std::string& list, const std::string& name,
                       const std::string& port = "");

// The interfaces NCCL's and gloo's sockets use, named by `env`'s
// NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME among those under
// SYSFS/class/net (a name no interface matches is kept: it is missing);
// else `routed` (route_interface()) when not empty. An exclusion list
// names no interface: then `routed` too.
std::vector<std::string> socket_interfaces(const std::string& sysfs_root, const env_map& env,
                                           const std::string& routed);

// The interface whose address this host would send from to reach
// `address` (an IP literal): a UDP socket's connect, which sends nothing,
// and getifaddrs. Empty when it cannot tell.
std::string route_interface(const std::string& address);

// What sysfs says of the ports (those NCCL_IB_HCA selects) and of
// `interfaces`. A tree without /class/infiniband has no ports.
nic_snapshot read_nic_snapshot(const std::string& sysfs_root, const std::string& ib_hca,
                               const std::vector<std::string>& interfaces);

// The watch across checks: the counters of the check before and the
// problems already reported, so that a port still down is said once and a
// counter is judged by its rise since the last check, never by its total
// (it counts since boot).
class nic_health {
 public:
  // The findings (check "nic") of `now`: one per problem, each one line
  // with its evidence and the command to check it by hand, `repeated` when
  // the check before reported it already; one healthy finding when there
  // is none.
  std::vector<health_finding> judge(const nic_snapshot& now, bool gating);

 private:
  // Counter values of the check before, by "port mlx5_0/1" or "eth0".
  std::map<std::string, std::uint64_t> counters_;
  std::set<std::string> reported_;  // problems' keys, as of the last check
};

}  // namespace dtrun::agent
