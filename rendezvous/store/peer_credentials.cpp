#include "rendezvous/store/peer_credentials.h"

#include <cerrno>
#include <cstring>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

namespace dtrun::rendezvous {
namespace {

// Closes the netlink socket on every return path.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

peer_uid_result failure(std::string why) { return {std::nullopt, std::move(why)}; }

// Fills family and the 4-tuple of the *client's* socket: its source is our
// peer, its destination is us. An IPv4 client of a dual-stack listener
// shows up as IPv4-mapped IPv6 here but lives in the kernel's IPv4 tables
// (as does an IPv6 socket connected to a mapped address), so mapped pairs
// are looked up as IPv4.
bool client_tuple(const sockaddr_storage& local, const sockaddr_storage& peer,
                  inet_diag_req_v2& req) {
  if (local.ss_family == AF_INET && peer.ss_family == AF_INET) {
    const auto& l = reinterpret_cast<const sockaddr_in&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
    req.sdiag_family = AF_INET;
    req.id.idiag_sport = p.sin_port;
    req.id.idiag_dport = l.sin_port;
    std::memcpy(req.id.idiag_src, &p.sin_addr, sizeof p.sin_addr);
    std::memcpy(req.id.idiag_dst, &l.sin_addr, sizeof l.sin_addr);
    return true;
  }
  if (local.ss_family == AF_INET6 && peer.ss_family == AF_INET6) {
    const auto& l = reinterpret_cast<const sockaddr_in6&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
    req.id.idiag_sport = p.sin6_port;
    req.id.idiag_dport = l.sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&l.sin6_addr) && IN6_IS_ADDR_V4MAPPED(&p.sin6_addr)) {
      req.sdiag_family = AF_INET;
      std::memcpy(req.id.idiag_src, p.sin6_addr.s6_addr + 12, 4);
      std::memcpy(req.id.idiag_dst, l.sin6_addr.s6_addr + 12, 4);
    } else {
      req.sdiag_family = AF_INET6;
      // A link-local client socket is bound to its interface; the lookup
      // only matches it with that interface named.
      req.id.idiag_if = p.sin6_scope_id;
      std::memcpy(req.id.idiag_src, &p.sin6_addr, sizeof p.sin6_addr);
      std::memcpy(req.id.idiag_dst, &l.sin6_addr, sizeof l.sin6_addr);
    }
    return true;
  }
  return false;
}

}  // namespace

std::optional<connection_addresses> addresses_of(int fd) {
  connection_addresses a;
  socklen_t local_len = sizeof a.local;
  socklen_t peer_len = sizeof a.peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&a.peer), &peer_len) != 0) {
    return std::nullopt;
  }
  return a;
}

peer_uid_result local_peer_uid(int fd) {
  auto ends = addresses_of(fd);
  if (!ends) {
    return failure(fmt::format("cannot read the connection's addresses: {}", std::strerror(errno)));
  }
  const auto& [local, peer] = *ends;

  struct {
    nlmsghdr header;
    inet_diag_req_v2 body;
  } request{};
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.header.nlmsg_flags = NLM_F_REQUEST;  // one exact socket, not a dump
  request.header.nlmsg_seq = 1;
  request.body.sdiag_protocol = IPPROTO_TCP;
  request.body.idiag_states = ~0U;
  request.body.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.body.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (!client_tuple(local, peer, request.body)) return failure("not a TCP/IP connection");

  fd_guard nl{::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)};
  if (nl.fd < 0) {
    return failure(fmt::format("netlink socket diagnostics are unavailable: {}",
                               std::strerror(errno)));
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent;
  do {
    sent = ::sendto(nl.fd, &request, sizeof request, 0, reinterpret_cast<sockaddr*>(&kernel),
                    sizeof kernel);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    return failure(fmt::format("netlink socket diagnostics refused the query: {}",
                               std::strerror(errno)));
  }
  // The kernel answers inside sendto(), so the reply is already queued;
  // MSG_DONTWAIT guarantees the event loop can never block here.
  alignas(nlmsghdr) char buffer[8192];
  ssize_t received;
  do {
    received = ::recv(nl.fd, buffer, sizeof buffer, MSG_DONTWAIT);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    return failure(fmt::format("netlink socket diagnostics did not answer: {}",
                               std::strerror(errno)));
  }
  auto length = static_cast<unsigned int>(received);
  for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, length);
       h = NLMSG_NEXT(h, length)) {
    if (h->nlmsg_seq != request.header.nlmsg_seq) continue;
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) break;
      if (e->error == -ENOENT) return failure("no socket on this machine matches the client");
      return failure(fmt::format("netlink socket diagnostics failed: {}",
                                 std::strerror(-e->error)));
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
    const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof *m)) break;
    // The same socket we asked about, by its ports (the kernel matched the
    // full tuple; this guards against a reply to something else).
    if (m->id.idiag_sport != request.body.id.idiag_sport ||
        m->id.idiag_dport != request.body.id.idiag_dport) {
      return failure("netlink socket diagnostics answered about another socket");
    }
    // A TIME_WAIT remnant has no owner (the kernel reports uid 0).
    if (m->idiag_state == TCP_TIME_WAIT) return failure("the client has already closed");
    return {static_cast<uid_t>(m->idiag_uid), {}};
  }
  return failure("netlink socket diagnostics gave no usable answer");
}

}  // namespace dtrun::rendezvous
