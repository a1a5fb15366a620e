// host:port as users write it: "node1:29400", "10.0.0.1", "[fe80::1]:80",
// "::1" (a bare IPv6 literal has no port).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::rendezvous {

struct endpoint {
  std::string host;  // without brackets
  std::uint16_t port = 0;
};

// nullopt when the text is empty, the brackets do not match, or the port is
// not a number in 0..65535. A missing port becomes `default_port`.
std::optional<endpoint> parse_endpoint(std::string_view text, std::uint16_t default_port);

// Whether `host` could ever resolve: an IP address, or a DNS name whose
// labels are letters, digits, '-' and '_', 1-63 bytes each, at most 253
// in all (a final '.' allowed). False for what no resolver answers ("a b",
// "node/1", "x..y"): worth failing at once rather than retrying.
bool could_resolve(std::string_view host);

// "host:port", bracketing IPv6 hosts.
std::string to_string(const endpoint& ep);

}  // namespace dtrun::rendezvous
