// An in-memory round_store: the c10d store's value rules (store_semantics)
// in one process, on one event loop, with no socket. The rendezvous
// algorithm's unit tests run every node of a cluster against one
// memory_round_server, in milliseconds and inside a network namespace with
// no interface up.
//
// It keeps round_store's contract (round_store.h): a client applies its
// operations in call order, one at a time, a WAIT (or a get/multi_get of
// keys not there yet) holding up the ones behind it until its keys appear
// or its timeout passes (store_wait_timeout); every callback runs once,
// posted to the loop, never inline. A client's last wills are executed when
// it closes (a node that dies: its connection closes), as the c10d server
// does; closing fails what is still queued with store_connection_error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous {

class memory_round_client;

class memory_round_server {
 public:
  explicit memory_round_server(boost::asio::io_context& io);
  ~memory_round_server();
  memory_round_server(const memory_round_server&) = delete;
  memory_round_server& operator=(const memory_round_server&) = delete;

  // A new client; local_address() says `address` (what the store sees).
  std::shared_ptr<round_store> client(std::string address = "127.0.0.1");

  // The value under `key` now; nullopt when absent. For assertions.
  std::optional<std::string> value(const std::string& key) const;
  // Sets `key` as a client would (waking the waits on it).
  void set(const std::string& key, const std::string& value);
  // Every operation applied so far, by any client ("set <key>", ...).
  const std::vector<std::string>& journal() const;

  struct state;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<state> state_;
};

}  // namespace dtrun::rendezvous
