// One io_context hosting both a store_server and its event-loop clients:
// the agent's situation when it hosts the store itself.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/async_store_client.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::rendezvous::testing {

struct one_loop {
  boost::asio::io_context io;
  store_server server{io, {.host = "127.0.0.1"}};

  std::shared_ptr<async_store_client> client(wire::dialect d = wire::dialect::v2) {
    tcp_store_client_options options;
    options.port = server.port();
    options.dialect = d;
    options.timeout = std::chrono::seconds(5);
    auto c = async_store_client::create(io, options);
    c->connect([](store_result r) {
      if (r.error) std::rethrow_exception(r.error);
    });
    return c;
  }
};

template <typename E>
inline bool holds(const std::exception_ptr& error, std::string* message = nullptr) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const E& e) {
    if (message) *message = e.what();
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace dtrun::rendezvous::testing
