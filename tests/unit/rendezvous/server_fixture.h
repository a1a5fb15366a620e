// A store_server on its own thread, for tests that talk to it over TCP.
#pragma once

#include <future>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/store/store_server.h"
#include "rendezvous/store/tcp_store_client.h"

namespace dtrun::rendezvous::testing {

class server_thread {
 public:
  explicit server_thread(store_server_options options = {.host = "127.0.0.1"})
      : server_(io_, std::move(options)), thread_([this] { io_.run(); }) {}

  ~server_thread() {
    boost::asio::post(io_, [this] { server_.stop(); });
    thread_.join();
  }

  std::uint16_t port() const { return server_.port(); }

  std::shared_ptr<tcp_store_client> client(wire::dialect d = wire::dialect::v2,
                                           std::string key_prefix = "/") {
    tcp_store_client_options options;
    options.port = port();
    options.dialect = d;
    options.key_prefix = std::move(key_prefix);
    options.timeout = std::chrono::seconds(10);
    return std::make_shared<tcp_store_client>(options);
  }

  // Stats read on the server's own thread, so the read does not race.
  store_server_stats stats() {
    std::promise<store_server_stats> result;
    boost::asio::post(io_, [&] { result.set_value(server_.stats()); });
    return result.get_future().get();
  }

 private:
  boost::asio::io_context io_;
  store_server server_;
  std::thread thread_;
};

// A loopback port where every connection is refused, for as long as this
// object lives: bound but never listening, so no other test or process can
// take the port in the meantime (a port bound, closed and reused later
// could be).
class refusing_port {
 public:
  refusing_port() : socket_(io_) {
    socket_.open(boost::asio::ip::tcp::v4());
    socket_.bind({boost::asio::ip::make_address("127.0.0.1"), 0});
  }
  std::uint16_t port() const { return socket_.local_endpoint().port(); }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

}  // namespace dtrun::rendezvous::testing
