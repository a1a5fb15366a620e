// The fixture of the rendezvous algorithm's unit tests
// (dynamic_rendezvous_test.cpp, dynamic_rendezvous_exit_test.cpp): every
// node of a cluster in one process, on one event loop, running the
// production dynamic_rendezvous against one in-memory store
// (memory_round_store.h), with a fake store_host (port numbers from a
// counter) and a fake rendezvous_os. No socket, no OS call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_os.h"
#include "rendezvous/algorithm/store_host.h"
#include "rendezvous/store/memory_round_store.h"
#include "rendezvous/store/round_store.h"
#include "round_test_support.h"

// A namespace of its own, the test cases' too: a unity batch compiles the
// test files of the folder together.
namespace memory_cluster {

using namespace round_test_support;

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

class fake_os final : public rendezvous_os {
 public:
  explicit fake_os(int node) : node_(node) {}
  bool is_this_machine(const std::string& host) const override { return host == "localhost"; }
  int reserve_port(const std::string&) const override { return 50000 + node_; }
  std::string host_name() const override { return fmt::format("host{}", node_); }
  long pid() const override { return 1000 + node_; }

 private:
  int node_;
};

// Hosts nothing real: ports are numbers from a counter the cluster shares.
class fake_store_host final : public store_host {
 public:
  fake_store_host(std::uint16_t endpoint, int& next_port) : endpoint_(endpoint), next_(next_port) {}
  std::uint16_t endpoint_port() const override { return endpoint_; }
  std::uint16_t open_worker_store() override {
    worker_ = static_cast<std::uint16_t>(next_++);
    return worker_;
  }
  std::uint16_t worker_store_port() const override { return worker_; }
  void close_worker_store() override { worker_ = 0; }
  store_server_stats stats() const override { return {}; }
  void stop() override { worker_ = 0; }

 private:
  std::uint16_t endpoint_;
  std::uint16_t worker_ = 0;
  int& next_;
};

// A node whose process hangs (SIGSTOP) with its connection open: from
// hang() on, its requests are never answered, and no will runs.
class hanging_store final : public round_store {
 public:
  hanging_store(std::shared_ptr<round_store> inner, const bool& hung)
      : inner_(std::move(inner)), hung_(hung) {}
  void connect(store_callback done) override { inner_->connect(gate(done)); }
  void set(std::string k, std::string v, store_callback done) override {
    if (!hung_) inner_->set(std::move(k), std::move(v), std::move(done));
  }
  void multi_set(std::vector<std::string> k, std::vector<std::string> v,
                 store_callback done) override {
    if (!hung_) inner_->multi_set(std::move(k), std::move(v), std::move(done));
  }
  void get(std::string k, store_duration t, store_callback done) override {
    if (!hung_) inner_->get(std::move(k), t, gate(done));
  }
  void add(std::string k, std::int64_t d, store_callback done) override {
    if (!hung_) inner_->add(std::move(k), d, gate(done));
  }
  void compare_set(std::string k, std::string e, std::string d, store_callback done) override {
    if (!hung_) inner_->compare_set(std::move(k), std::move(e), std::move(d), gate(done));
  }
  void check(std::vector<std::string> k, store_callback done) override {
    if (!hung_) inner_->check(std::move(k), gate(done));
  }
  void wait(std::vector<std::string> k, store_duration t, store_callback done) override {
    if (!hung_) inner_->wait(std::move(k), t, gate(done));
  }
  void delete_key(std::string k, store_callback done) override {
    if (!hung_) inner_->delete_key(std::move(k), gate(done));
  }
  void multi_get(std::vector<std::string> k, store_duration t, store_callback done) override {
    if (!hung_) inner_->multi_get(std::move(k), t, gate(done));
  }
  void read_now(std::vector<std::string> k, store_callback done) override {
    if (!hung_) inner_->read_now(std::move(k), gate(done));
  }
  void set_will(std::string w, std::string t, std::string v, store_callback done) override {
    if (!hung_) inner_->set_will(std::move(w), std::move(t), std::move(v), gate(done));
  }
  void withdraw_will(std::string w, store_callback done) override {
    if (!hung_) inner_->withdraw_will(std::move(w), gate(done));
  }
  // A hung process closes nothing: its will must not run.
  void close() override {
    if (!hung_) inner_->close();
  }
  std::string local_address() const override { return inner_->local_address(); }

 private:
  // Replies that arrive once the node hangs are never seen.
  store_callback gate(store_callback done) const {
    return [&hung = hung_, done = std::move(done)](store_result r) {
      if (!hung) done(std::move(r));
    };
  }
  std::shared_ptr<round_store> inner_;
  const bool& hung_;
};

struct cluster {
  // Declared before `nodes`, so destroyed after: a node's destructor shuts
  // it down, which still reaches its store, its hung flag and its log.
  boost::asio::io_context io;
  memory_round_server store{io};
  std::vector<std::string> log;
  std::uint16_t port = 29400;  // the endpoint store's, hosted by node 0
  int next_port = 41000;       // the workers' stores'
  std::vector<std::unique_ptr<bool>> hung;  // per node: hang(i)
  std::vector<std::unique_ptr<dynamic_rendezvous>> nodes;
  // When set, wraps each client a node connects (node index, client): a
  // test's faults on the way to the store.
  std::function<std::shared_ptr<round_store>(int, std::shared_ptr<round_store>)> wrap;

  dynamic_rendezvous_options options(int min_nodes, int max_nodes, int nproc) {
    // No socket: no need to wait long for latecomers.
    return node_options(port, nodes.empty(), min_nodes, max_nodes, nproc, 20ms, log);
  }

  // Node i with fakes for the OS and hosting and clients of `store`.
  dynamic_rendezvous& add_node(dynamic_rendezvous_options o) {
    int index = static_cast<int>(nodes.size());
    hung.push_back(std::make_unique<bool>(false));
    rendezvous_parts parts;
    parts.os = std::make_shared<fake_os>(index);
    parts.host = std::make_unique<fake_store_host>(o.host_store ? port : 0, next_port);
    parts.connect = [this, index, &h = *hung.back()](std::chrono::milliseconds) {
      auto client = [&]() -> std::shared_ptr<round_store> {
        auto c = std::make_shared<hanging_store>(store.client(), h);
        if (wrap) return wrap(index, c);
        return c;
      };
      auto ops = client();
      return round_store_clients{ops, client()};
    };
    nodes.push_back(std::make_unique<dynamic_rendezvous>(io, std::move(o), std::move(parts)));
    return *nodes.back();
  }

  dynamic_rendezvous& add(int min_nodes, int max_nodes, int nproc = 1) {
    return add_node(options(min_nodes, max_nodes, nproc));
  }

  // Adds a node with options(min, max, 1) adjusted by `tweak`.
  dynamic_rendezvous& add_with(int min_nodes, int max_nodes,
                               const std::function<void(dynamic_rendezvous_options&)>& tweak) {
    auto o = options(min_nodes, max_nodes, 1);
    tweak(o);
    return add_node(std::move(o));
  }

  // Node i hangs: alive to its connection, silent to the store.
  void hang(std::size_t i) { *hung.at(i) = true; }

  void shutdown_all() {
    for (auto& n : nodes) n->shutdown();
  }

  // Nodes 0..count-1 finish; each one's exit barrier outcome (its error's
  // message, "" when released) goes to `released`, and the last one's
  // shuts the cluster down.
  void finish_all(std::size_t count, std::vector<std::string>& released) {
    for (std::size_t n = 0; n < count; ++n) {
      nodes[n]->finish([this, count, &released](std::exception_ptr e) {
        released.push_back(e ? message_of(e) : "");
        if (released.size() == count) shutdown_all();
      });
    }
  }

  std::size_t log_count(const std::string& text) const {
    return static_cast<std::size_t>(std::count_if(log.begin(), log.end(), [&](const auto& l) {
      return l.find(text) != std::string::npos;
    }));
  }
};

}  // namespace memory_cluster
