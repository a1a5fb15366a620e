// The multi-node rendezvous (torchrun's c10d backend, redone): nodes meet
// in a store that one of them hosts, agree on a round, get deterministic
// group ranks, and learn at once when the round is over because a node
// failed, died or wants to join.
//
// Every store operation is O(1) per node per round (ADD, SET, WAIT, GET of
// one key); only the node that closes a round reads all N descriptors. The
// protocol and its keys are described in docs/rendezvous.md.
//
// Everything runs on the agent's event loop. The algorithm does no I/O of
// its own: it talks to a round_store its connector opens, hosts stores
// through a store_host, and asks the OS through rendezvous_os
// (rendezvous_parts). The production parts are the c10d TCPStore (or the
// launcher's store_factory) and the real OS; the unit tests pass an
// in-memory store and fakes (docs/design.md, "The rendezvous core").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/algorithm/rendezvous_os.h"
#include "rendezvous/algorithm/store_host.h"
#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store_access.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::rendezvous {

struct dynamic_rendezvous_options {
  std::string run_id = "none";
  std::string endpoint_host;
  std::uint16_t endpoint_port = 29400;
  // Host the store on this node: from is_host in --rdzv-conf, else decided
  // by matching endpoint_host against this machine's names and addresses.
  bool host_store = false;
  // When host_store came from that matching (not from is_host): if the
  // port is taken, join as a client instead, as torchrun does (several
  // nodes of one machine, e.g. a loopback test, all match the endpoint).
  bool join_if_store_port_in_use = false;
  int min_nodes = 1;
  int max_nodes = 1;
  // --node-unit: a round's node count is a multiple of this (min_nodes and
  // max_nodes are); the arrivals beyond wait as spares until a unit is
  // complete (docs/rendezvous.md, "Spare nodes").
  int node_unit = 1;
  int local_world_size = 1;
  // True: workers bootstrap from a store of the agents: in a dynamic
  // rendezvous a fresh one per round that the endpoint's host opens
  // (MASTER_ADDR = the endpoint host, MASTER_PORT = that store's port),
  // else the endpoint store itself (docs/rendezvous.md, "Addresses"). False: group rank 0's worker hosts its own store on a
  // port its agent reserved, as torchrun 1.13 does.
  bool workers_use_agent_store = true;
  // With workers_use_agent_store: the node hosting the endpoint store
  // opens a fresh store for each round's workers (torch >= 2.x workers,
  // unlike 1.13's, do not prefix their keys by round). False for the
  // static backend, whose MASTER_PORT stays --master-port, as torchrun's.
  bool fresh_worker_store = true;
  // Static rendezvous (--node-rank with --master-addr/--master-port): this
  // node's group rank, the same in every round. -1: assigned.
  int fixed_rank = -1;
  // The address others reach this node at (--local-addr). Empty: the local
  // address of our connection to the store, which is reachable by
  // construction, unlike the hostname in many clusters.
  std::string local_addr;
  std::chrono::milliseconds join_timeout = std::chrono::seconds(600);
  std::chrono::milliseconds last_call_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds close_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds keep_alive_interval = std::chrono::seconds(5);
  int keep_alive_max_attempt = 3;
  std::chrono::milliseconds exit_barrier_timeout = std::chrono::seconds(300);
  // Job-wide: a failure beyond this many restarts fails the job on every
  // node (the others learn it when they try to rejoin).
  int max_restarts = 0;
  // How long to wait for the store before saying that nobody hosts it.
  std::chrono::milliseconds no_host_warning = std::chrono::seconds(5);
  // Who may connect to the store this node hosts (--store-allow-networks).
  store_access_options store_access;
  // Threads of their own for the stores this node hosts (the rendezvous
  // store and each round's workers' store; --rdzv-conf store_threads): 0
  // serves them on the agent's event loop. On a host node of a large job
  // every worker's init_process_group lands on the workers' store; its
  // own threads keep that load off the loop that supervises the workers.
  unsigned store_threads = 0;
  // The etcd backend: clients of an external store (no node hosts it;
  // host_store is false). Empty: the c10d TCPStore at the endpoint.
  round_store_factory store_factory;
  // An external store's own liveness bound: how long after an agent dies
  // the store runs its will (etcd: lease_ttl). Zero: the c10d store, which
  // runs it when the agent's connection closes; a node that stops without
  // closing it is found by the heartbeat ring (keep_alive_*).
  std::chrono::milliseconds store_liveness{0};
  // With an external store nobody hosts the workers' store either: every
  // node opens one when it joins, and the round uses group rank 0's
  // (MASTER_ADDR = rank 0's address). The others close theirs.
  bool worker_store_on_every_node = false;
  std::function<void(const std::string&)> log;
};

// The parts of a dynamic_rendezvous that do I/O. Every field is required.
struct rendezvous_parts {
  std::shared_ptr<const rendezvous_os> os;
  // The stores this node hosts (the rendezvous store when its
  // endpoint_port() is nonzero, each round's workers' store).
  std::unique_ptr<store_host> host;
  // Opens this node's clients of the rendezvous store, once per round.
  round_store_connector connect;
};

// The production parts for `options`: the real OS, a tcp_store_host
// (binding the store at once when options.host_store; store_error when it
// cannot), and the c10d client or, with options.store_factory, its clients.
rendezvous_parts production_parts(boost::asio::io_context& io,
                                  const dynamic_rendezvous_options& options);

class dynamic_rendezvous final : public rendezvous_handler {
 public:
  // With the production parts: hosting nodes bind the store at once
  // (store_error when they cannot).
  dynamic_rendezvous(boost::asio::io_context& io, dynamic_rendezvous_options options);
  // With the given parts (the unit tests: an in-memory store, fakes).
  dynamic_rendezvous(boost::asio::io_context& io, dynamic_rendezvous_options options,
                     rendezvous_parts parts);
  ~dynamic_rendezvous() override;

  // As rendezvous_handler's; calling it again before `done` ran abandons
  // that call, which then completes with a store_error, and no reply of
  // the abandoned round acts on the new one.
  void next_round(completion done) override;
  const std::string& run_id() const override;
  void shutdown() override;
  void watch_round(std::function<void(round_record)> on_over) override;
  void report_failure(round_record failure, restart_completion done) override;
  std::chrono::milliseconds departure_bound() const override;
  void fail_job(round_record failure, std::function<void()> done) override;
  void stop_job(std::string reason, std::function<void()> done) override;
  void stop_seen(std::function<void()> done) override;
  void leave_job(round_record departure, std::function<void()> done) override;
  void request_checkpoint(std::string who, std::function<void(bool)> done) override;
  void watch_checkpoint(std::function<void(std::string)> on_request) override;
  void read_machine(std::string machine_key, record_completion done) override;
  void quarantine(std::string machine_key, std::string record, round_record departure,
                  std::function<void()> done) override;
  void quarantine_list(std::function<void(std::vector<std::string>)> done) override;
  void wait_outside(std::chrono::milliseconds timeout,
                    std::function<void(bool, std::string)> done) override;
  void finish(std::function<void(std::exception_ptr)> done) override;
  void publish_failure(std::int64_t round, std::string record, std::function<void()> done) override;
  void round_failures(std::int64_t round, failures_completion done) override;
  void share_progress(bool progressed, std::function<void(std::int64_t)> done) override;
  void publish_status(std::string status_json, std::function<void()> stored) override;
  void census(std::function<void(census_counts)> done) override;
  void share_work(std::string node_work, bool gather, work_completion done) override;
  void publish_stragglers(std::string verdict) override;
  void share_preflight(std::string figures, std::chrono::milliseconds timeout,
                       preflight_judge judge, std::function<void(std::string)> done) override;

  // The store's port when this node hosts it (0 otherwise).
  std::uint16_t store_port() const;
  // The port of the store this node opened for the workers of its latest
  // round (0 when it opened none: not the host, or it does not apply).
  std::uint16_t worker_store_port() const;
  // What the hosted store has served so far (all zero when not hosting):
  // the rendezvous benchmark's requests and bytes per node.
  store_server_stats store_stats() const;

  class impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace dtrun::rendezvous
