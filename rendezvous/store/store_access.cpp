#include "rendezvous/store/store_access.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>

#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"
#include "rendezvous/store/peer_credentials.h"

namespace dtrun::rendezvous {
namespace ip = boost::asio::ip;

namespace {

ip::address_v6 as_v6(const ip::address& a) {
  return a.is_v4() ? ip::make_address_v6(ip::v4_mapped, a.to_v4()) : a.to_v6();
}

client_network parse_one(std::string entry) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("'{}' is not a client network: {}",
                                             printable(entry), why));
  };
  bool v6 = entry.find(':') != std::string::npos;
  std::string cidr = entry.find('/') != std::string::npos ? entry : entry + (v6 ? "/128" : "/32");
  boost::system::error_code ec;
  if (v6) {
    auto net = ip::make_network_v6(cidr, ec);
    if (ec) throw bad("write an IPv6 network as ADDRESS/PREFIX, e.g. fd00::/8");
    if (net != net.canonical()) {
      throw bad(fmt::format("bits are set after the prefix; did you mean {}?",
                            net.canonical().to_string()));
    }
    return {net.to_string(), net};
  }
  auto net = ip::make_network_v4(cidr, ec);
  if (ec) throw bad("write an IPv4 network as ADDRESS/PREFIX, e.g. 10.0.0.0/8");
  if (net != net.canonical()) {
    throw bad(fmt::format("bits are set after the prefix; did you mean {}?",
                          net.canonical().to_string()));
  }
  return {net.to_string(),
          ip::network_v6(as_v6(net.address()), static_cast<unsigned short>(net.prefix_length() + 96))};
}

std::optional<ip::address> to_address(const sockaddr_storage& s) {
  if (s.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(s);
    return ip::address_v4(ntohl(a.sin_addr.s_addr));
  }
  if (s.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(s);
    ip::address_v6::bytes_type bytes;
    std::copy(std::begin(a.sin6_addr.s6_addr), std::end(a.sin6_addr.s6_addr), bytes.begin());
    return ip::address_v6(bytes);
  }
  return std::nullopt;
}

// One of this machine's interface addresses (a local process that
// connected through the node's own address rather than loopback).
bool is_interface_address(const ip::address_v6& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (auto* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    sockaddr_storage s{};
    if (i->ifa_addr->sa_family == AF_INET) {
      std::memcpy(&s, i->ifa_addr, sizeof(sockaddr_in));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      std::memcpy(&s, i->ifa_addr, sizeof(sockaddr_in6));
    } else {
      continue;
    }
    if (auto a = to_address(s)) found = as_v6(*a) == address;
  }
  ::freeifaddrs(list);
  return found;
}

// "" when the client's address is allowed, else the reason.
std::string check_network(const store_access_options& o, int fd) {
  auto ends = addresses_of(fd);
  if (!ends) return "cannot read its address";
  auto peer_address = to_address(ends->peer);
  auto local_address = to_address(ends->local);
  if (!peer_address || !local_address) return "not a TCP/IP connection";
  auto client = as_v6(*peer_address);
  if (client.is_loopback() || (client.is_v4_mapped() &&
                               ip::make_address_v4(ip::v4_mapped, client).is_loopback())) {
    return {};
  }
  for (const auto& n : o.allowed_networks) {
    if (contains(n, client)) return {};
  }
  if (client == as_v6(*local_address) || is_interface_address(client)) return {};
  std::string list;
  for (const auto& n : o.allowed_networks) list += (list.empty() ? "" : ",") + n.text;
  return fmt::format("its address is outside {} {}", o.networks_option, list);
}

std::string check_user(const store_access_options& o, uid_t euid, int fd) {
  auto peer = local_peer_uid(fd);
  if (!peer.uid) {
    return fmt::format("cannot tell which user it belongs to ({}); {} admits every user",
                       peer.error, o.same_user_opt_out);
  }
  if (*peer.uid != euid) {
    return fmt::format("it belongs to uid {}, not to dtrun's user (uid {}); {} admits every user",
                       *peer.uid, euid, o.same_user_opt_out);
  }
  return {};
}

}  // namespace

std::vector<client_network> parse_client_networks(std::string_view list) {
  std::vector<client_network> out;
  std::string text(list);
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string entry(trim(std::string_view(text).substr(start, comma - start)));
    if (entry.empty()) {
      if (!trim(text).empty()) {
        throw std::invalid_argument("an empty entry in the list of client networks (two commas?)");
      }
    } else {
      out.push_back(parse_one(entry));
    }
    start = comma + 1;
  }
  return out;
}

bool contains(const client_network& network, const ip::address& address) {
  return ip::network_v6(as_v6(address), network.network.prefix_length()).canonical() ==
         network.network;
}

std::function<std::string(int fd)> make_admit(store_access_options options) {
  if (!options.same_user_only && options.allowed_networks.empty()) return {};
  return [o = std::move(options), euid = ::geteuid()](int fd) -> std::string {
    if (!o.allowed_networks.empty()) {
      if (auto refusal = check_network(o, fd); !refusal.empty()) return refusal;
    }
    if (o.same_user_only) return check_user(o, euid, fd);
    return {};
  };
}

std::string same_user_rule_unavailable(const store_access_options& options) {
  if (!options.same_user_only) return {};
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::acceptor acceptor(io);
  ip::tcp::socket client(io);
  ip::tcp::socket accepted(io);
  ip::tcp::endpoint loopback(ip::make_address_v4("127.0.0.1"), 0);
  acceptor.open(loopback.protocol(), ec);
  if (!ec) acceptor.bind(loopback, ec);
  if (!ec) acceptor.listen(1, ec);
  if (!ec) client.connect(acceptor.local_endpoint(), ec);
  if (!ec) acceptor.accept(accepted, ec);
  std::string why;
  if (ec) {
    why = fmt::format("a test connection on 127.0.0.1 failed: {}", ec.message());
  } else if (auto peer = local_peer_uid(accepted.native_handle()); !peer.uid) {
    why = peer.error;
  } else if (*peer.uid != ::geteuid()) {
    why = fmt::format("the kernel names uid {} as the owner of our own socket", *peer.uid);
  } else {
    return {};
  }
  return fmt::format("cannot tell which user connects to the store ({}); {} lets every local "
                     "user use it",
                     why, options.same_user_opt_out);
}

}  // namespace dtrun::rendezvous
