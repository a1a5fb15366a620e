// A blocking store client over TCP, speaking PyTorch's TCPStore protocol.
//
// It talks to dtrun's store_server and to a real PyTorch TCPStore server
// (choose the dialect that server speaks, or let the client find it). Keys
// get PyTorch's client-side "/" prefix by default, so set("k") here and
// TCPStore.set("k") in Python address the same wire key.
//
// Not thread-safe: one connection, one request at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rendezvous/store/store.h"
#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous {

struct tcp_store_client_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  // v2 sends the validation handshake and can cancel a timed-out wait;
  // v1_13 talks to Debian's torch 1.13 servers.
  wire::dialect dialect = wire::dialect::v2;
  // Find the dialect instead (`dialect` is then ignored): the 2.x handshake
  // first, answered by PyTorch 2.x and dtrun servers; a server that closes
  // the connection on it (1.13 does, harmlessly: wire::handshake_nonce)
  // gets 1.13's GETNUMKEYS on a new connection, and answering it makes it
  // 1.13. Neither probe changes the server's keys.
  bool detect_dialect = false;
  // Prepended to every key on the wire. "/" is what PyTorch's client does;
  // "" addresses raw wire keys.
  std::string key_prefix = "/";
  // How long connect() keeps retrying (refused, unreachable, not yet
  // listening) with exponential backoff and jitter.
  store_duration connect_timeout = std::chrono::seconds(60);
  // Default for get/wait/multi_get, and the limit for any single reply.
  store_duration timeout = std::chrono::minutes(5);
  // The async client only: called once, with the resolver's message, at
  // the first failure to resolve `host`; connect() goes on retrying until
  // connect_timeout (a name that does not resolve yet may appear: a pod or
  // a Slurm job still starting), but the user hears of it at once.
  std::function<void(const std::string&)> on_first_resolve_failure;
  // Largest value accepted in a reply.
  std::uint64_t max_value_bytes = wire::limits{}.max_value_bytes;
};

class tcp_store_client final : public store {
 public:
  // Connects (retrying until connect_timeout) and, for v2, validates;
  // when detecting, finds the dialect.
  // Throws store_connection_error / store_timeout naming host:port.
  explicit tcp_store_client(tcp_store_client_options options);
  ~tcp_store_client() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, store_duration timeout) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;

  // v2 only: round-trips a nonce; true when the server echoed it.
  bool ping();

  // The dialect in use (found by the first connection when detecting).
  wire::dialect dialect() const;

  // The local address of the connection (what the server sees as us);
  // multi-node agents advertise it as their reachable address.
  std::string local_address() const;

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dtrun::rendezvous
