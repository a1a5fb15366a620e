// Which local user is on the other end of an accepted TCP connection.
//
// TCP has no SO_PEERCRED, but when the client runs on this machine its
// socket is in this network namespace, and the kernel's socket diagnostics
// (NETLINK_SOCK_DIAG, see `man 7 sock_diag`) can look it up by its exact
// 4-tuple and tell who owns it. The standalone store uses this to admit
// only the processes of the user who runs dtrun.
#pragma once

#include <optional>
#include <string>

#include <sys/socket.h>
#include <sys/types.h>

namespace dtrun::rendezvous {

// Both ends of a connected socket, as the kernel reports them.
struct connection_addresses {
  sockaddr_storage local{};
  sockaddr_storage peer{};
};

// getsockname() and getpeername() of `fd`; nullopt (errno says why) when
// either fails, e.g. the peer is already gone.
std::optional<connection_addresses> addresses_of(int fd);

struct peer_uid_result {
  // The uid owning the client's socket; nullopt when it cannot be told.
  std::optional<uid_t> uid;
  // Why uid is nullopt, one phrase (e.g. "netlink socket diagnostics are
  // unavailable: Protocol not supported", "no local socket matches").
  std::string error;
};

// Looks up the client end of the connected TCP socket `fd` (an accepted
// socket, IPv4, IPv6 or IPv4-mapped IPv6): the socket whose own address and
// port are fd's peer address and port and whose peer is fd's local
// address and port. Found only when the client is on this machine and in
// this network namespace; a client that already closed (TIME_WAIT) is not
// found. One netlink round trip, no state kept between calls. Never throws.
peer_uid_result local_peer_uid(int fd);

}  // namespace dtrun::rendezvous
