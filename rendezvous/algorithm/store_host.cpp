#include "rendezvous/algorithm/store_host.h"

#include <utility>

#include <fmt/format.h>

#include "rendezvous/store/async_store_client.h"
#include "rendezvous/store/store.h"
#include "rendezvous/store/tcp_store_client.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

namespace {

class tcp_store_host final : public store_host {
 public:
  tcp_store_host(asio::io_context& io, tcp_store_host_options options,
                 std::function<void(const std::string&)> log)
      : io_(io), options_(std::move(options)) {
    if (!options_.host_endpoint) return;
    // Every interface: the other nodes reach us through the endpoint's
    // address, whichever interface that is.
    try {
      server_ = std::make_unique<store_server>(
          io_, store_server_options{.host = "",
                                    .port = options_.endpoint_port,
                                    .admit = make_admit(options_.access),
                                    .threads = options_.threads});
      log(fmt::format("hosting the rendezvous store on port {}", server_->port()));
    } catch (const store_address_in_use&) {
      if (!options_.join_if_port_in_use) throw;
      log(fmt::format(
          "port {} is in use on this machine (another node here hosts the store?); joining "
          "it as a client (--rdzv-conf is_host=1 insists on hosting)",
          options_.endpoint_port));
    }
  }

  std::uint16_t endpoint_port() const override { return server_ ? server_->port() : 0; }

  std::uint16_t open_worker_store() override {
    worker_server_.reset();
    worker_server_ = std::make_unique<store_server>(
        io_, store_server_options{.host = "", .port = 0,
                                  .admit = make_admit(options_.access),
                                  .threads = options_.threads});
    return worker_server_->port();
  }

  std::uint16_t worker_store_port() const override {
    return worker_server_ ? worker_server_->port() : 0;
  }

  void close_worker_store() override {
    if (!worker_server_) return;
    worker_server_->stop();
    worker_server_.reset();
  }

  store_server_stats stats() const override {
    return server_ ? server_->stats() : store_server_stats{};
  }

  void stop() override {
    if (worker_server_) worker_server_->stop();
    if (server_) server_->stop();
  }

 private:
  asio::io_context& io_;
  tcp_store_host_options options_;
  std::unique_ptr<store_server> server_;
  // This round's store for the workers (open_worker_store).
  std::unique_ptr<store_server> worker_server_;
};

}  // namespace

std::unique_ptr<store_host> make_tcp_store_host(asio::io_context& io,
                                                tcp_store_host_options options,
                                                std::function<void(const std::string&)> log) {
  return std::make_unique<tcp_store_host>(io, std::move(options), std::move(log));
}

round_store_connector c10d_connector(asio::io_context& io, c10d_connector_options options,
                                     std::function<void(const std::string&)> log) {
  // Once per run, not per round: the name is the same every time.
  auto resolve_warned = std::make_shared<bool>(false);
  return [&io, options = std::move(options), log = std::move(log),
          resolve_warned](std::chrono::milliseconds connect_timeout) {
    bool hosting = options.hosted_port != 0;
    tcp_store_client_options o;
    o.host = hosting ? std::string("127.0.0.1") : options.endpoint_host;
    o.port = hosting ? options.hosted_port : options.endpoint_port;
    o.connect_timeout = connect_timeout;
    if (!hosting) {
      o.on_first_resolve_failure = [options, log, resolve_warned](const std::string& why) {
        if (std::exchange(*resolve_warned, true)) return;
        log(fmt::format(
            "warning: cannot resolve the rendezvous endpoint '{}' ({}); retrying for up to {} s "
            "in case the name appears (a pod or job still starting); check --rdzv-endpoint",
            options.endpoint_host, why, options.join_timeout.count() / 1000));
      };
    }
    // The host's requests go to the store in this very process: they can
    // be slow (its loop serving thousands of nodes on a busy machine) but
    // not lost, and a timeout would end the job for every node because this
    // one was busy (seen with 1,024 agents on 2 cores). Other nodes give up
    // on a store that does not answer within close_timeout.
    o.timeout = hosting ? no_timeout : options.close_timeout;
    auto ops = async_store_client::create(io, o);
    // The long waits in a watch lane of the same connection: one
    // connection per node, so one store process can hold 10,000 of them.
    auto waits = ops->watch_lane();
    return round_store_clients{std::move(ops), std::move(waits)};
  };
}

round_store_connector external_connector(round_store_factory factory,
                                         std::chrono::milliseconds wait_timeout) {
  // etcd's waits are watches anyway: a second client costs no connection
  // per wait.
  return [factory = std::move(factory), wait_timeout](std::chrono::milliseconds connect_timeout) {
    auto ops = factory(connect_timeout);
    auto waits = factory(wait_timeout);
    return round_store_clients{std::move(ops), std::move(waits)};
  };
}

}  // namespace dtrun::rendezvous
