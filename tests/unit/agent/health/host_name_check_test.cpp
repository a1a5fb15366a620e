// host_name_check: when this host's name sends gloo ranks on other nodes
// to loopback, and when the check applies at all.
#include <catch2/catch.hpp>

#include <boost/asio/ip/address.hpp>

#include "agent/health/host_name_check.h"

using dtrun::agent::host_name_check_applies;
using dtrun::agent::loopback_host_warning;
using boost::asio::ip::make_address;

TEST_CASE("a name that resolves only to loopback is warned about, naming the address",
          "[host_name_check]") {
  CHECK(loopback_host_warning("h2", {make_address("127.0.1.1")}) ==
        "this host's name 'h2' resolves only to 127.0.1.1, a loopback address: gloo workers on "
        "the other nodes will try to reach this node's workers there and fail with 'Connection "
        "refused'; map the name to this host's address in /etc/hosts or DNS, or set "
        "GLOO_SOCKET_IFNAME to the interface the nodes share");
  CHECK_FALSE(loopback_host_warning("h2", {make_address("::1"), make_address("127.0.0.1")})
                  .empty());
}

TEST_CASE("a name that does not resolve is warned about: gloo falls back to loopback",
          "[host_name_check]") {
  CHECK_THAT(loopback_host_warning("h\x01x", {}),
             Catch::StartsWith("this host's name 'h\\x01x' does not resolve to an address "
                               "(gloo then uses loopback):"));
}

TEST_CASE("one address off loopback is enough", "[host_name_check]") {
  CHECK(loopback_host_warning("h2", {make_address("127.0.1.1"), make_address("10.0.0.2")})
            .empty());
  CHECK(loopback_host_warning("h2", {make_address("fd00::2")}).empty());
}

TEST_CASE("the check applies to several nodes over a store off loopback without an interface",
          "[host_name_check]") {
  CHECK(host_name_check_applies(2, "10.0.0.1", {}));
  CHECK(host_name_check_applies(2, "node1.cluster", {}));
  CHECK_FALSE(host_name_check_applies(1, "10.0.0.1", {}));
  CHECK_FALSE(host_name_check_applies(2, "127.0.0.1", {}));
  CHECK_FALSE(host_name_check_applies(2, "::1", {}));
  CHECK_FALSE(host_name_check_applies(2, "localhost", {}));
  CHECK_FALSE(host_name_check_applies(2, "10.0.0.1", {{"GLOO_SOCKET_IFNAME", "eth0"}}));
}
