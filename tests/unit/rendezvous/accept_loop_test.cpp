#include <catch2/catch.hpp>

#include <chrono>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "rendezvous/base/accept_loop.h"

using namespace std::chrono_literals;
using dtrun::accept_loop;
using tcp = boost::asio::ip::tcp;

namespace {

tcp::endpoint listen_on_loopback(accept_loop<tcp>& loop) {
  auto& acceptor = loop.acceptor();
  tcp::endpoint any(boost::asio::ip::make_address("127.0.0.1"), 0);
  acceptor.open(any.protocol());
  acceptor.bind(any);
  acceptor.listen();
  return acceptor.local_endpoint();
}

}  // namespace

TEST_CASE("accept_loop hands over each connection until stopped") {
  boost::asio::io_context io;
  accept_loop<tcp> loop(io, 100ms);
  auto where = listen_on_loopback(loop);
  std::vector<tcp::socket> accepted;
  int failures = 0;
  tcp::socket a(io), b(io);
  loop.start(
      [&](tcp::socket s) {
        accepted.push_back(std::move(s));
        if (accepted.size() == 2) loop.stop();  // then io.run() runs out of work
      },
      [&](const boost::system::error_code&) { ++failures; });
  a.connect(where);
  b.connect(where);
  io.run();
  CHECK(accepted.size() == 2);
  CHECK(failures == 0);
  CHECK_FALSE(loop.acceptor().is_open());
}

TEST_CASE("accept_loop: nothing is handed over after stop()") {
  boost::asio::io_context io;
  accept_loop<tcp> loop(io, 100ms);
  auto where = listen_on_loopback(loop);
  int accepted = 0;
  loop.start([&](tcp::socket) { ++accepted; }, [](const boost::system::error_code&) {});
  tcp::socket client(io);
  client.connect(where);  // queued in the kernel, not yet accepted
  loop.stop();
  io.run();
  CHECK(accepted == 0);
}
