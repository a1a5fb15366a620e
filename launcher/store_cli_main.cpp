// dtrun-store: run a TCPStore-compatible server, or poke at one.
//
//   dtrun-store serve --host 127.0.0.1 --port 0      prints the bound port
//   dtrun-store --endpoint host:port set KEY VALUE
//   dtrun-store --endpoint host:port get KEY
//   ... add KEY DELTA | wait KEY... | check KEY... | delete KEY | num-keys
//
// Exit codes: 0 success; 1 `check` found a key missing or `delete` found
// nothing; 2 usage error; 3 store unreachable or connection lost; 4 timed
// out; 5 any other store error.
#include <cstdio>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/endpoint.h"
#include "rendezvous/store_access.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store_client.h"

namespace {

using namespace dtrun::rendezvous;

struct client_flags {
  std::string endpoint = "127.0.0.1:29500";
  bool raw_keys = false;
  std::string dialect = "v2";
  double timeout_s = 30;
  double connect_timeout_s = 10;
};

int serve(const std::string& host, std::uint16_t port, std::uint64_t max_value_bytes,
          store_access_options access) {
  boost::asio::io_context io;
  store_server_options options;
  options.host = host;
  options.port = port;
  if (auto why = same_user_rule_unavailable(access); !why.empty()) throw store_error(why);
  options.admit = make_admit(std::move(access));
  options.limits.max_value_bytes = max_value_bytes;
  options.limits.max_request_bytes = std::max(options.limits.max_request_bytes,
                                               4 * max_value_bytes);
  store_server server(io, options);
  std::cout << server.port() << std::endl;
  fmt::print(stderr, "dtrun-store: serving on {} (Ctrl-C stops)\n",
             to_string({host.empty() ? "*" : host, server.port()}));
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) server.stop();
  });
  io.run();
  return 0;
}

std::unique_ptr<tcp_store_client> connect(const client_flags& flags) {
  auto ep = parse_endpoint(flags.endpoint, 29500);
  if (!ep) {
    throw CLI::ValidationError("--endpoint", "'" + flags.endpoint +
                                                 "' is not host:port (IPv6 as [addr]:port)");
  }
  if (flags.dialect != "v2" && flags.dialect != "v1.13") {
    throw CLI::ValidationError("--dialect", "must be v2 or v1.13");
  }
  tcp_store_client_options options;
  options.host = ep->host;
  options.port = ep->port;
  options.dialect = flags.dialect == "v2" ? wire::dialect::v2 : wire::dialect::v1_13;
  options.key_prefix = flags.raw_keys ? "" : "/";
  options.timeout = std::chrono::milliseconds(static_cast<long>(flags.timeout_s * 1000));
  options.connect_timeout =
      std::chrono::milliseconds(static_cast<long>(flags.connect_timeout_s * 1000));
  return std::make_unique<tcp_store_client>(options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrun-store: a PyTorch TCPStore-compatible key-value server and client"};
  app.require_subcommand(1);
  client_flags flags;
  app.add_option("--endpoint", flags.endpoint, "store address, host:port")
      ->envname("DTRUN_STORE_ENDPOINT");
  app.add_flag("--raw-keys", flags.raw_keys,
               "address wire keys as they are (without PyTorch's '/' prefix)");
  app.add_option("--dialect", flags.dialect, "v2 (PyTorch 2.x, dtrun) or v1.13")
      ->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "seconds to wait for keys and replies")
      ->capture_default_str();
  app.add_option("--connect-timeout", flags.connect_timeout_s,
                 "seconds to keep retrying the connection")
      ->capture_default_str();

  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::uint64_t max_value_bytes = wire::limits{}.max_value_bytes;
  auto* serve_cmd = app.add_subcommand("serve", "run a store server until SIGINT/SIGTERM");
  serve_cmd->add_option("--host", host, "address to listen on ('' for all interfaces)")
      ->capture_default_str();
  serve_cmd->add_option("--port", port, "port; 0 picks a free one (printed)")
      ->capture_default_str();
  serve_cmd->add_option("--max-value-bytes", max_value_bytes, "largest value a client may set")
      ->capture_default_str();
  store_access_options access{.same_user_opt_out = "leaving out --same-user",
                              .networks_option = "--allow-networks"};
  std::string allow_networks;
  serve_cmd->add_flag("--same-user", access.same_user_only,
                      "admit only this user's processes on this machine (docs/store.md)");
  serve_cmd->add_option("--allow-networks", allow_networks,
                        "admit clients from these networks only (and this machine), "
                        "e.g. 10.0.0.0/8,fd00::/8");

  std::string key, value;
  std::int64_t delta = 1;
  std::vector<std::string> keys;
  auto* set_cmd = app.add_subcommand("set", "set KEY to VALUE");
  set_cmd->add_option("key", key)->required();
  set_cmd->add_option("value", value)->required();
  auto* get_cmd = app.add_subcommand("get", "print the value of KEY (waits for it)");
  get_cmd->add_option("key", key)->required();
  auto* add_cmd = app.add_subcommand("add", "add DELTA to the counter KEY, print the result");
  add_cmd->add_option("key", key)->required();
  add_cmd->add_option("delta", delta)->capture_default_str();
  auto* wait_cmd = app.add_subcommand("wait", "wait until every KEY exists");
  wait_cmd->add_option("keys", keys)->required();
  auto* check_cmd = app.add_subcommand("check", "exit 0 when every KEY exists, else 1");
  check_cmd->add_option("keys", keys)->required();
  auto* delete_cmd = app.add_subcommand("delete", "delete KEY; exit 1 when it did not exist");
  delete_cmd->add_option("key", key)->required();
  auto* num_keys_cmd = app.add_subcommand("num-keys", "print the number of keys");

  CLI11_PARSE(app, argc, argv);

  try {
    if (serve_cmd->parsed()) {
      try {
        access.allowed_networks = parse_client_networks(allow_networks);
      } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError("--allow-networks", e.what());
      }
      return serve(host, port, max_value_bytes, std::move(access));
    }
    auto client = connect(flags);
    if (set_cmd->parsed()) {
      client->set(key, value);
      // SET has no reply; a round trip proves the server took it before
      // we exit and close the connection.
      client->check({key});
    } else if (get_cmd->parsed()) {
      auto v = client->get(key);
      std::fwrite(v.data(), 1, v.size(), stdout);
      std::fputc('\n', stdout);
    } else if (add_cmd->parsed()) {
      fmt::print("{}\n", client->add(key, delta));
    } else if (wait_cmd->parsed()) {
      client->wait(keys);
    } else if (check_cmd->parsed()) {
      bool ready = client->check(keys);
      fmt::print("{}\n", ready ? "ready" : "not ready");
      return ready ? 0 : 1;
    } else if (delete_cmd->parsed()) {
      bool existed = client->delete_key(key);
      fmt::print("{}\n", existed ? "deleted" : "not found");
      return existed ? 0 : 1;
    } else if (num_keys_cmd->parsed()) {
      fmt::print("{}\n", client->num_keys());
    }
    return 0;
  } catch (const CLI::Error& e) {
    return app.exit(e);
  } catch (const store_timeout& e) {
    fmt::print(stderr, "dtrun-store: {}\n", e.what());
    return 4;
  } catch (const store_connection_error& e) {
    fmt::print(stderr, "dtrun-store: {}\n", e.what());
    return 3;
  } catch (const store_error& e) {
    fmt::print(stderr, "dtrun-store: {}\n", e.what());
    return 5;
  }
}
