#include "rendezvous/algorithm/rendezvous_os.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace dtrun::rendezvous {

namespace asio = boost::asio;

namespace {

std::set<std::string> local_interface_addresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[NI_MAXHOST];
    auto family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string s(text);
      out.insert(s.substr(0, s.find('%')));  // drop IPv6 zone ids
    }
  }
  freeifaddrs(list);
  return out;
}

class system_os final : public rendezvous_os {
 public:
  bool is_this_machine(const std::string& host) const override {
    if (host == "localhost" || host.empty()) return true;
    boost::system::error_code ec;
    auto literal = asio::ip::make_address(host, ec);
    if (!ec && literal.is_loopback()) return true;
    auto locals = local_interface_addresses();
    if (!ec) return locals.count(literal.to_string()) != 0;
    auto own = asio::ip::host_name(ec);
    if (!ec && (host == own || host.substr(0, host.find('.')) == own)) return true;
    // A name: does it resolve to one of our addresses?
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(host, "0", ec);
    if (ec) return false;
    for (const auto& r : results) {
      auto a = r.endpoint().address();
      if (a.is_loopback() || locals.count(a.to_string()) != 0) return true;
    }
    return false;
  }

  int reserve_port(const std::string& addr) const override {
    asio::io_context io;
    asio::ip::tcp::acceptor probe(io);
    boost::system::error_code ec;
    auto address = asio::ip::make_address(addr, ec);
    if (ec) address = asio::ip::address_v4::any();
    asio::ip::tcp::endpoint ep(address, 0);
    probe.open(ep.protocol(), ec);
    if (!ec) probe.bind(ep, ec);
    if (ec) return 0;
    return probe.local_endpoint(ec).port();
  }

  std::string host_name() const override { return asio::ip::host_name(); }

  long pid() const override { return static_cast<long>(::getpid()); }
};

}  // namespace

std::shared_ptr<const rendezvous_os> system_rendezvous_os() {
  static const auto os = std::make_shared<const system_os>();
  return os;
}

bool is_this_machine(const std::string& host) {
  return system_rendezvous_os()->is_this_machine(host);
}

}  // namespace dtrun::rendezvous
