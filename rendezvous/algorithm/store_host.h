// The stores a node hosts and how it reaches the rendezvous store: the I/O
// the rendezvous algorithm (dynamic_rendezvous) leaves to its parts.
//  - store_host: the endpoint's rendezvous store (when this node hosts it)
//    and each round's fresh store for the workers. The real one serves the
//    c10d TCPStore (store_server); the unit tests use a fake without
//    sockets.
//  - round_store_connector: opens this node's clients of the rendezvous
//    store for a round (the c10d TCPStore client with its watch lane, an
//    external store's clients, or the tests' in-memory store).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store_access.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::rendezvous {

class store_host {
 public:
  virtual ~store_host() = default;

  // The port of the rendezvous store this node hosts; 0 when it hosts none
  // (then the rendezvous store is another node's, or external).
  virtual std::uint16_t endpoint_port() const = 0;
  // Opens a fresh, empty store for one round's workers, closing the last
  // one, and returns its port. Throws store_error when none can be opened.
  virtual std::uint16_t open_worker_store() = 0;
  // The open workers' store's port; 0 when none is open.
  virtual std::uint16_t worker_store_port() const = 0;
  virtual void close_worker_store() = 0;
  // What the hosted rendezvous store has served (zero when none).
  virtual store_server_stats stats() const = 0;
  // Stops every store it hosts.
  virtual void stop() = 0;
};

struct tcp_store_host_options {
  // Host the rendezvous store on this port, every interface.
  bool host_endpoint = false;
  std::uint16_t endpoint_port = 29400;
  // When the port is taken: log and host nothing instead of throwing
  // store_address_in_use (hosting was decided by matching the endpoint's
  // name, and several nodes of one machine all match it).
  bool join_if_port_in_use = false;
  store_access_options access;
  unsigned threads = 0;  // store_server_options::threads
};

// The c10d TCPStore host. Binds the endpoint store at once.
std::unique_ptr<store_host> make_tcp_store_host(boost::asio::io_context& io,
                                                tcp_store_host_options options,
                                                std::function<void(const std::string&)> log);

// One node's clients of the rendezvous store for a round: `ops` for its
// requests, `waits` for the long waits (the round closing, `over`).
struct round_store_clients {
  std::shared_ptr<round_store> ops, waits;
};
using round_store_connector =
    std::function<round_store_clients(std::chrono::milliseconds connect_timeout)>;

struct c10d_connector_options {
  std::string endpoint_host;
  std::uint16_t endpoint_port = 29400;
  // Nonzero: this node hosts the store on this port; it talks to it over
  // loopback and never times out a request (slow, never lost).
  std::uint16_t hosted_port = 0;
  std::chrono::milliseconds join_timeout{600'000};
  // How long a node that does not host the store waits for a reply.
  std::chrono::milliseconds close_timeout{30'000};
};

// Clients of the c10d TCPStore: one connection, its watch lane for waits.
// An endpoint name that does not resolve is logged once per connector.
round_store_connector c10d_connector(boost::asio::io_context& io, c10d_connector_options options,
                                     std::function<void(const std::string&)> log);

// Clients of an external store (etcd): two of `factory`'s, both given
// `wait_timeout` to connect.
round_store_connector external_connector(round_store_factory factory,
                                         std::chrono::milliseconds wait_timeout);

}  // namespace dtrun::rendezvous
