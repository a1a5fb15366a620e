#include <catch2/catch.hpp>

#include <optional>
#include <stdexcept>

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include "rendezvous/store/peer_credentials.h"
#include "rendezvous/store/store_access.h"
#include "server_fixture.h"

using namespace dtrun::rendezvous;
namespace ip = boost::asio::ip;

namespace {

// A connected pair on `listen_at`, the client connecting to `connect_to`;
// null when this machine cannot listen there (no IPv6).
struct tcp_pair {
  boost::asio::io_context io;
  ip::tcp::socket client{io};
  ip::tcp::socket accepted{io};
};

std::unique_ptr<tcp_pair> connect_pair(const ip::tcp::endpoint& listen_at,
                                       const ip::address& connect_to, bool v6_only = true) {
  auto p = std::make_unique<tcp_pair>();
  ip::tcp::acceptor acceptor(p->io);
  boost::system::error_code ec;
  acceptor.open(listen_at.protocol(), ec);
  if (!ec && listen_at.protocol() == ip::tcp::v6()) acceptor.set_option(ip::v6_only(v6_only), ec);
  if (!ec) acceptor.bind(listen_at, ec);
  if (!ec) acceptor.listen(4, ec);
  if (ec) return nullptr;
  p->client.connect({connect_to, acceptor.local_endpoint().port()});
  acceptor.accept(p->accepted);
  return p;
}

std::string texts(const std::vector<client_network>& list) {
  std::string out;
  for (const auto& n : list) out += (out.empty() ? "" : " ") + n.text;
  return out;
}

std::string parse_error(const std::string& list) {
  try {
    parse_client_networks(list);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("client networks parse as CIDR lists of IPv4 and IPv6") {
  CHECK(texts(parse_client_networks("10.0.0.0/8,192.168.1.0/24,::1/128")) ==
        "10.0.0.0/8 192.168.1.0/24 ::1/128");
  CHECK(texts(parse_client_networks(" 10.1.2.3 , fd00::/8 ")) == "10.1.2.3/32 fd00::/8");
  auto mapped = parse_client_networks("::ffff:10.0.0.0/104");
  CHECK(texts(mapped) == "::ffff:10.0.0.0/104");
  CHECK(contains(mapped[0], ip::make_address("10.1.2.3")));
  CHECK(parse_client_networks("").empty());
}

TEST_CASE("malformed client networks are refused with what to write") {
  CHECK_THAT(parse_error("10.1.0.0/8"), Catch::Contains("did you mean 10.0.0.0/8"));
  CHECK_THAT(parse_error("fd00::1/8"), Catch::Contains("did you mean fd00::/8"));
  CHECK_THAT(parse_error("10.0.0.0/33"), Catch::Contains("'10.0.0.0/33' is not a client network"));
  CHECK_THAT(parse_error("node1"), Catch::Contains("e.g. 10.0.0.0/8"));
  CHECK_THAT(parse_error("fd00::/129"), Catch::Contains("e.g. fd00::/8"));
  CHECK_THAT(parse_error("10.0.0.0/8,,1.2.3.4"), Catch::Contains("empty entry"));
  CHECK_THAT(parse_error("10.0.0.0/8,"), Catch::Contains("empty entry"));
}

TEST_CASE("addresses match networks across IPv4 IPv6 and IPv4-mapped forms") {
  auto nets = parse_client_networks("10.0.0.0/8,fd00::/8");
  const auto& v4 = nets[0];
  const auto& v6 = nets[1];
  CHECK(contains(v4, ip::make_address("10.0.0.0")));
  CHECK(contains(v4, ip::make_address("10.255.255.255")));
  CHECK(contains(v4, ip::make_address("::ffff:10.1.2.3")));
  CHECK_FALSE(contains(v4, ip::make_address("11.0.0.0")));
  CHECK_FALSE(contains(v4, ip::make_address("9.255.255.255")));
  CHECK_FALSE(contains(v4, ip::make_address("fd00::1")));
  CHECK(contains(v6, ip::make_address("fd12:3456::1")));
  CHECK_FALSE(contains(v6, ip::make_address("fe80::1")));
  CHECK_FALSE(contains(v6, ip::make_address("10.1.2.3")));
}

TEST_CASE("the kernel names our own uid for a loopback IPv4 client") {
  auto p = connect_pair({ip::make_address("127.0.0.1"), 0}, ip::make_address("127.0.0.1"));
  REQUIRE(p);
  auto result = local_peer_uid(p->accepted.native_handle());
  INFO(result.error);
  REQUIRE(result.uid.has_value());
  CHECK(*result.uid == ::geteuid());
}

TEST_CASE("the kernel names our own uid for IPv6 and IPv4-mapped clients") {
  auto v6 = connect_pair({ip::make_address("::1"), 0}, ip::make_address("::1"));
  auto mapped = connect_pair({ip::tcp::v6(), 0}, ip::make_address("127.0.0.1"), false);
  if (!v6 || !mapped) {
    WARN("skipped: no IPv6 loopback on this machine");
    return;
  }
  for (auto* p : {v6.get(), mapped.get()}) {
    CAPTURE(p->accepted.remote_endpoint().address().to_string());
    auto result = local_peer_uid(p->accepted.native_handle());
    INFO(result.error);
    REQUIRE(result.uid.has_value());
    CHECK(*result.uid == ::geteuid());
  }
  CHECK(mapped->accepted.remote_endpoint().address().to_v6().is_v4_mapped());
}

TEST_CASE("a socket that is not TCP is refused by name of the opt-out") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  auto result = local_peer_uid(fds[0]);
  CHECK_FALSE(result.uid.has_value());
  CHECK_THAT(result.error, Catch::Contains("not a TCP/IP connection"));
  auto admit = make_admit({.same_user_only = true});
  REQUIRE(admit);
  CHECK_THAT(admit(fds[0]), Catch::Contains("--store-allow-any-user admits every user"));
  auto by_network = make_admit({.allowed_networks = parse_client_networks("10.0.0.0/8")});
  CHECK_THAT(by_network(fds[0]), Catch::Contains("not a TCP/IP connection"));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("no rule means no admit function") {
  CHECK_FALSE(make_admit({}));
}

TEST_CASE("the same-user rule and the allow-list admit this machine's own clients") {
  auto p = connect_pair({ip::make_address("127.0.0.1"), 0}, ip::make_address("127.0.0.1"));
  REQUIRE(p);
  auto admit = make_admit({.same_user_only = true,
                           .allowed_networks = parse_client_networks("10.99.0.0/16")});
  CHECK(admit(p->accepted.native_handle()) == "");
}

TEST_CASE("a store with the same-user rule serves our own client") {
  testing::server_thread server(
      {.host = "127.0.0.1", .admit = make_admit({.same_user_only = true})});
  auto client = server.client();
  client->set("k", "v");
  CHECK(client->get("k") == "v");
  CHECK(server.stats().connections_refused == 0);
  CHECK(server.stats().connections_accepted == 1);
}

TEST_CASE("the same-user rule reports that it works on this machine") {
  // Where socket diagnostics are missing this fails with the reason, the
  // same line a launch would stop with.
  CHECK(same_user_rule_unavailable({.same_user_only = true}) == "");
  CHECK(same_user_rule_unavailable({}) == "");
}
