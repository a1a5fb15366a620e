#include "rendezvous/endpoint.h"

#include <charconv>

namespace dtrun::rendezvous {
namespace {

std::optional<std::uint16_t> parse_port(std::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value > 65535) {
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(value);
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

std::string to_string(const endpoint& ep) {
  bool v6 = ep.host.find(':') != std::string::npos;
  return (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port);
}

}  // namespace dtrun::rendezvous
