#include <catch2/catch.hpp>

#include "rendezvous/base/endpoint.h"

using namespace dtrun::rendezvous;

TEST_CASE("endpoints parse the way users write them") {
  struct row {
    std::string text;
    std::optional<std::pair<std::string, int>> expected;
  };
  std::vector<row> table = {
      {"node1:29400", {{"node1", 29400}}},
      {"node1", {{"node1", 29500}}},
      {"10.0.0.1:0", {{"10.0.0.1", 0}}},
      {"[::1]:80", {{"::1", 80}}},
      {"[fe80::1%eth0]:80", {{"fe80::1%eth0", 80}}},
      {"[::1]", {{"::1", 29500}}},
      {"::1", {{"::1", 29500}}},
      {"host.example.com:65535", {{"host.example.com", 65535}}},
      {"", std::nullopt},
      {"host:", std::nullopt},
      {":80", std::nullopt},
      {"host:65536", std::nullopt},
      {"host:8x", std::nullopt},
      {"[::1", std::nullopt},
      {"[]:80", std::nullopt},
      {"[::1]80", std::nullopt},
  };
  for (const auto& r : table) {
    CAPTURE(r.text);
    auto ep = parse_endpoint(r.text, 29500);
    REQUIRE(ep.has_value() == r.expected.has_value());
    if (ep) {
      CHECK(ep->host == r.expected->first);
      CHECK(ep->port == r.expected->second);
    }
  }
  CHECK(to_string({"::1", 5}) == "[::1]:5");
  CHECK(to_string({"a", 5}) == "a:5");
}
