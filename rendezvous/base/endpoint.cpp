#include "rendezvous/base/endpoint.h"

#include <algorithm>

#include <boost/asio/ip/address.hpp>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {
namespace {

std::optional<std::uint16_t> parse_port(std::string_view text) {
  return parse_whole<std::uint16_t>(text);
}

}  // namespace

std::optional<endpoint> parse_endpoint(std::string_view text, std::uint16_t default_port) {
  if (text.empty()) return std::nullopt;
  endpoint ep{.host = {}, .port = default_port};
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close == 1) return std::nullopt;
    ep.host = std::string(text.substr(1, close - 1));
    auto rest = text.substr(close + 1);
    if (rest.empty()) return ep;
    if (rest.front() != ':') return std::nullopt;
    auto port = parse_port(rest.substr(1));
    if (!port) return std::nullopt;
    ep.port = *port;
    return ep;
  }
  auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    ep.host = std::string(text);
    return ep;
  }
  if (text.find(':', colon + 1) != std::string_view::npos) {
    ep.host = std::string(text);  // a bare IPv6 literal
    return ep;
  }
  if (colon == 0) return std::nullopt;
  ep.host = std::string(text.substr(0, colon));
  auto port = parse_port(text.substr(colon + 1));
  if (!port) return std::nullopt;
  ep.port = *port;
  return ep;
}

bool could_resolve(std::string_view host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(std::string(host), ec);
  if (!ec) return true;
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return false;
  std::size_t start = 0;
  while (start <= host.size()) {
    std::size_t end = std::min(host.find('.', start), host.size());
    std::string_view label = host.substr(start, end - start);
    if (label.empty() || label.size() > 63) return false;
    for (char c : label) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

std::string to_string(const endpoint& ep) {
  bool v6 = ep.host.find(':') != std::string::npos;
  return (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port);
}

}  // namespace dtrun::rendezvous
