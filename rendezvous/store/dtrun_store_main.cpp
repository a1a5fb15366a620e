// dtrun-store: run a TCPStore-compatible server, or poke at one.
//
//   dtrun-store serve --host 127.0.0.1 --port 0      prints the bound port
//   dtrun-store --endpoint host:port set KEY VALUE
//   dtrun-store --endpoint host:port get KEY
//   ... add KEY DELTA | wait KEY... | check KEY... | delete KEY | num-keys | dialect
//
// The client finds the server's dialect (--dialect auto, the default):
// PyTorch 2.x and dtrun servers answer the 2.x handshake, torch 1.13 closes
// on it and then answers a 1.13 request (tcp_store_client.h).
//
// Exit codes: 0 success; 1 `check` found a key missing or `delete` found
// nothing; 2 usage error (CLI11's parse errors included, and every number
// out of its range); 3 store unreachable (refused, unresolvable, nothing
// answered within --connect-timeout) or connection lost; 4 timed out
// waiting for a key or a reply; 5 any other store error (also `serve`
// failing to listen).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rendezvous/base/build_version.h"
#include "rendezvous/base/number_checks.h"
#include "rendezvous/base/usage_error.h"
#include "rendezvous/base/endpoint.h"
#include "rendezvous/base/exit_codes.h"
#include "rendezvous/store/store_access.h"
#include "rendezvous/store/store_server.h"
#include "rendezvous/store/tcp_store_client.h"

namespace {

using namespace dtrun::rendezvous;
using dtrun::usage_error;

constexpr int exit_unreachable = 3;
constexpr int exit_timeout = 4;
constexpr int exit_store_error = 5;

// The largest --max-value-bytes: a store is for coordination, and the
// server buffers a whole request (up to 4 values) in memory.
constexpr std::int64_t max_value_bytes_limit = std::int64_t{1} << 30;

// Waits and connections: positive (a 0 wait would fail at once) and at
// most 10 years.
constexpr dtrun::duration_limits client_duration_limits{false,
                                                                  dtrun::max_duration_s};

int usage(const std::string& message) {
  fmt::print(stderr, "dtrun-store: error: {} (run 'dtrun-store --help')\n",
             message.substr(0, message.find('\n')));
  return dtrun::exit_usage;
}

int fail(int code, const std::exception& e) {
  fmt::print(stderr, "dtrun-store: {}\n", e.what());
  return code;
}

struct client_flags {
  std::string endpoint = "127.0.0.1:29500";
  bool raw_keys = false;
  std::string dialect = "auto";
  double timeout_s = 30;
  double connect_timeout_s = 10;
};

int serve(const std::string& host, std::uint16_t port, std::uint64_t max_value_bytes,
          unsigned threads, store_access_options access) {
  boost::asio::io_context io;
  store_server_options options;
  options.host = host;
  options.port = port;
  // One thread is this one: main has nothing else to do.
  options.threads = threads > 1 ? threads : 0;
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
    throw usage_error(fmt::format(
        "--endpoint: '{}' is not host:port with a port from 0 to 65535 (IPv6 as [addr]:port)",
        flags.endpoint));
  }
  tcp_store_client_options options;
  options.host = ep->host;
  options.port = ep->port;
  options.detect_dialect = flags.dialect == "auto";
  options.dialect = flags.dialect == "v1.13" ? wire::dialect::v1_13 : wire::dialect::v2;
  options.key_prefix = flags.raw_keys ? "" : "/";
  options.timeout =
      dtrun::seconds_to_duration(flags.timeout_s, "--timeout", client_duration_limits);
  options.connect_timeout = dtrun::seconds_to_duration(
      flags.connect_timeout_s, "--connect-timeout", client_duration_limits);
  return std::make_unique<tcp_store_client>(options);
}

// The arguments for CLI11, "--flag=" split into "--flag" and "": an empty
// value, as getopt and argparse read it. CLI11 would take the next token
// as the value ("--endpoint= set k v" would connect to "set").
std::vector<std::string> empty_values_apart(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1) {
      std::string name = arg.substr(0, arg.size() - 1);
      const CLI::Option* opt = app.get_option_no_throw(name);
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (opt == nullptr) opt = sub->get_option_no_throw(name);
      }
      if (opt != nullptr && opt->get_expected_min() > 0) {
        args.push_back(name);
        args.emplace_back();
        continue;
      }
    }
    args.push_back(std::move(arg));
  }
  std::reverse(args.begin(), args.end());  // CLI11 consumes from the back
  return args;
}

// `serve`'s options.
struct serve_flags {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::uint64_t max_value_bytes = wire::limits{}.max_value_bytes;
  unsigned threads = 1;
  store_access_options access{.same_user_opt_out = "leaving out --same-user",
                              .networks_option = "--allow-networks"};
  std::string allow_networks;
};

// The client subcommands and their arguments.
struct client_commands {
  std::string key, value;
  std::int64_t delta = 1;
  std::vector<std::string> keys;
  CLI::App *set = nullptr, *get = nullptr, *add = nullptr, *wait = nullptr, *check = nullptr,
           *erase = nullptr, *num_keys = nullptr, *dialect = nullptr;
};

void add_client_flags(CLI::App& app, client_flags& flags) {
  app.add_option("--endpoint", flags.endpoint, "store address, host:port")
      ->envname("DTRUN_STORE_ENDPOINT");
  app.add_flag("--raw-keys", flags.raw_keys,
               "address wire keys as they are (without PyTorch's '/' prefix)");
  app.add_option("--dialect", flags.dialect,
                 "auto (find it), v2 (PyTorch 2.x, dtrun) or v1.13 (PyTorch 1.13)")
      ->check(CLI::IsMember({"auto", "v2", "v1.13"}))
      ->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "seconds to wait for keys and replies")
      ->check(dtrun::seconds_within("--timeout", client_duration_limits))
      ->capture_default_str();
  app.add_option("--connect-timeout", flags.connect_timeout_s,
                 "seconds to keep retrying the connection")
      ->check(dtrun::seconds_within("--connect-timeout", client_duration_limits))
      ->capture_default_str();
}

CLI::App* add_serve_command(CLI::App& app, serve_flags& f) {
  auto* serve_cmd = app.add_subcommand("serve", "run a store server until SIGINT/SIGTERM");
  serve_cmd->add_option("--host", f.host, "address to listen on ('' for all interfaces)")
      ->capture_default_str();
  serve_cmd->add_option("--port", f.port, "port; 0 picks a free one (printed)")
      ->check(dtrun::whole_number("--port", 0, dtrun::max_port))
      ->capture_default_str();
  serve_cmd->add_option("--max-value-bytes", f.max_value_bytes, "largest value a client may set")
      ->check(dtrun::whole_number("--max-value-bytes", 1, max_value_bytes_limit))
      ->capture_default_str();
  serve_cmd->add_option("--threads", f.threads,
                        "threads serving connections; more than 1 uses more cores for "
                        "thousands of clients (docs/store.md)")
      ->check(dtrun::whole_number("--threads", 1, max_store_threads))
      ->capture_default_str();
  serve_cmd->add_flag("--same-user", f.access.same_user_only,
                      "admit only this user's processes on this machine (docs/store.md)");
  serve_cmd->add_option("--allow-networks", f.allow_networks,
                        "admit clients from these networks only (and this machine), "
                        "e.g. 10.0.0.0/8,fd00::/8");
  return serve_cmd;
}

void add_client_commands(CLI::App& app, client_commands& c) {
  c.set = app.add_subcommand("set", "set KEY to VALUE");
  c.set->add_option("key", c.key)->required();
  c.set->add_option("value", c.value)->required();
  c.get = app.add_subcommand("get", "print the value of KEY (waits for it)");
  c.get->add_option("key", c.key)->required();
  c.add = app.add_subcommand("add", "add DELTA to the counter KEY, print the result");
  c.add->add_option("key", c.key)->required();
  c.add->add_option("delta", c.delta)
      ->check(dtrun::whole_number("add DELTA", std::numeric_limits<std::int64_t>::min(),
                                  std::numeric_limits<std::int64_t>::max()))
      ->capture_default_str();
  c.wait = app.add_subcommand("wait", "wait until every KEY exists");
  c.wait->add_option("keys", c.keys)->required();
  c.check = app.add_subcommand("check", "exit 0 when every KEY exists, else 1");
  c.check->add_option("keys", c.keys)->required();
  c.erase = app.add_subcommand("delete", "delete KEY; exit 1 when it did not exist");
  c.erase->add_option("key", c.key)->required();
  c.num_keys = app.add_subcommand("num-keys", "print the number of keys");
  c.dialect = app.add_subcommand(
      "dialect", "print the dialect in use: v2 (PyTorch 2.x, dtrun) or v1.13 (PyTorch 1.13)");
}

// The parsed client subcommand against `client`; its exit code.
int run_client_command(const client_commands& c, tcp_store_client& client) {
  if (c.set->parsed()) {
    client.set(c.key, c.value);
    // SET has no reply; a round trip proves the server took it before
    // we exit and close the connection.
    client.check({c.key});
  } else if (c.get->parsed()) {
    auto v = client.get(c.key);
    std::fwrite(v.data(), 1, v.size(), stdout);
    std::fputc('\n', stdout);
  } else if (c.add->parsed()) {
    fmt::print("{}\n", client.add(c.key, c.delta));
  } else if (c.wait->parsed()) {
    client.wait(c.keys);
  } else if (c.check->parsed()) {
    bool ready = client.check(c.keys);
    fmt::print("{}\n", ready ? "ready" : "not ready");
    return ready ? 0 : 1;
  } else if (c.erase->parsed()) {
    bool existed = client.delete_key(c.key);
    fmt::print("{}\n", existed ? "deleted" : "not found");
    return existed ? 0 : 1;
  } else if (c.num_keys->parsed()) {
    fmt::print("{}\n", client.num_keys());
  } else if (c.dialect->parsed()) {
    fmt::print("{}\n", client.dialect() == wire::dialect::v2 ? "v2" : "v1.13");
  }
  return 0;
}

int run_serve(serve_flags& f) {
  try {
    f.access.allowed_networks = parse_client_networks(f.allow_networks);
  } catch (const std::invalid_argument& e) {
    return usage(fmt::format("--allow-networks: {}", e.what()));
  }
  try {
    return serve(f.host, f.port, f.max_value_bytes, f.threads, std::move(f.access));
  } catch (const std::exception& e) {  // cannot listen: port in use, bad host
    return fail(exit_store_error, e);
  }
}

int run_client(const client_flags& flags, const client_commands& commands) {
  std::unique_ptr<tcp_store_client> client;
  try {
    client = connect(flags);
  } catch (const usage_error& e) {
    return usage(e.what());
  } catch (const store_error& e) {
    // Refused, unresolvable, or nothing answered within --connect-timeout
    // (that last one is a store_timeout, but the store was never reached).
    return fail(exit_unreachable, e);
  }
  try {
    return run_client_command(commands, *client);
  } catch (const store_timeout& e) {
    return fail(exit_timeout, e);
  } catch (const store_connection_error& e) {
    return fail(exit_unreachable, e);
  } catch (const std::exception& e) {
    return fail(exit_store_error, e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrun-store: a PyTorch TCPStore-compatible key-value server and client"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("dtrun-store {}", dtrun::build_version()),
                       "print the version and the git commit it was built from");
  client_flags flags;
  add_client_flags(app, flags);
  serve_flags serving;
  auto* serve_cmd = add_serve_command(app, serving);
  client_commands commands;
  add_client_commands(app, commands);
  try {
    auto args = empty_values_apart(app, argc, argv);
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" with exit code 0; every real one is a
    // usage error, exit 2 (not CLI11's own 104-109).
    if (e.get_exit_code() == 0) return app.exit(e);
    return usage(e.what());
  } catch (const usage_error& e) {  // a bad number (number_checks.h)
    return usage(e.what());
  }
  if (serve_cmd->parsed()) return run_serve(serving);
  return run_client(flags, commands);
}
