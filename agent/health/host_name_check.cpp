#include "agent/health/host_name_check.h"

#include <algorithm>
#include <memory>

#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace asio = boost::asio;

std::string loopback_host_warning(std::string_view host,
                                  const std::vector<asio::ip::address>& resolved) {
  if (std::any_of(resolved.begin(), resolved.end(),
                  [](const asio::ip::address& a) { return !a.is_loopback(); })) {
    return "";
  }
  std::string where =
      resolved.empty()
          ? std::string("does not resolve to an address (gloo then uses loopback)")
          : fmt::format("resolves only to {}, a loopback address",
                        resolved.front().to_string());
  return fmt::format(
      "this host's name '{}' {}: gloo workers on the other nodes will try to reach this "
      "node's workers there and fail with 'Connection refused'; map the name to this host's "
      "address in /etc/hosts or DNS, or set GLOO_SOCKET_IFNAME to the interface the nodes "
      "share",
      printable(host), where);
}

bool host_name_check_applies(int nodes, std::string_view store_host, const env_map& worker_env) {
  if (nodes <= 1 || worker_env.count("GLOO_SOCKET_IFNAME") != 0) return false;
  if (store_host == "localhost") return false;
  boost::system::error_code ec;
  auto store = asio::ip::make_address(std::string(store_host), ec);
  // A store named by host name: a real multi-host job.
  return ec || !store.is_loopback();
}

void check_host_name(asio::io_context& io, std::function<void(std::string)> warn) {
  boost::system::error_code ec;
  std::string host = asio::ip::host_name(ec);
  if (ec || host.empty()) return;
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(io);
  resolver->async_resolve(host, "", [resolver, host, warn = std::move(warn)](
                                        const boost::system::error_code& error,
                                        const asio::ip::tcp::resolver::results_type& results) {
    std::vector<asio::ip::address> addresses;
    if (!error) {
      for (const auto& entry : results) addresses.push_back(entry.endpoint().address());
    }
    auto line = loopback_host_warning(host, addresses);
    if (!line.empty()) warn(line);
  });
}

}  // namespace dtrun::agent
