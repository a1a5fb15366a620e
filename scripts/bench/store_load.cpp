// store_load: a load generator for TCPStore servers, used by
// scripts/bench/store to compare dtrun's store with PyTorch 1.13's.
//
// It speaks the PyTorch 1.13 wire dialect, which both servers understand,
// and is deliberately independent of dtrun's own codec and client, so the
// same bytes reach both servers. One thread, one Boost.Asio event loop,
// N connections, one request in flight per connection, no sleeps.
//
// Workloads (--op), each op timed from its first byte sent to its last
// reply byte received:
//   setget  set(k, v) then get(k) as a torch client does it: SET (no
//           reply) + WAIT(k) -> u8, then GET(k) -> bytes; the value read
//           back is checked. Each connection has its own key.
//   add     ADD(counter, 1) -> i64 on one counter shared by every
//           connection; at the end the counter must equal the number of
//           ADDs done.
// --idle N instead opens N connections (at most --connect-concurrency
// connecting at a time), holds them all, then proves each is served by a
// GETNUMKEYS round trip on every one. --background-idle N holds N idle
// connections open while a workload runs.
//
// Prints one JSON object on stdout. The clients (the connector, the
// workload connection) are in store_load_client.h.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "scripts/bench/store_bench.h"
#include "scripts/bench/store_load_client.h"

namespace dtrun::bench::store_load {
namespace {

// With --sync: tells the driver (on stdout) that the load is about to
// start or has just finished, and waits for its go-ahead (a line on
// stdin), so it can sample the server's CPU time exactly around the load,
// excluding connection setup and teardown.
void handshake(const run_state& state, const char* event) {
  if (!state.opts.sync) return;
  std::cout << nlohmann::json{{"event", event}}.dump() << std::endl;
  std::string ignored;
  std::getline(std::cin, ignored);
}

// CPU time (user + system) this process has used so far.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// After an ADD run: the shared counter must equal the ADDs done.
std::int64_t read_counter(run_state& state) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(state.endpoint);
  if (!state.validate_bytes.empty()) asio::write(socket, asio::buffer(state.validate_bytes));
  std::string req;
  put_u8(req, state.cmd.add);
  put_str(req, fmt::format("/bench/{}/counter", state.run_id));
  put_raw<std::int64_t>(req, 0);
  asio::write(socket, asio::buffer(req));
  std::int64_t value = 0;
  asio::read(socket, asio::buffer(&value, sizeof value));
  return value;
}

// What a load run measured, as store_load prints it; an ADD run's counter
// is read back and checked first.
nlohmann::json load_report(run_state& state, std::size_t connected, double connect_s,
                           double load_cpu_s, std::size_t background_idle) {
  auto elapsed = std::chrono::duration<double>(state.deadline - state.start).count();
  std::sort(state.latencies_ns.begin(), state.latencies_ns.end());
  nlohmann::json out{
      {"op", state.opts.op},
      {"connections", state.opts.connections},
      {"connected", connected},
      {"connect_s", connect_s},
      {"seconds", elapsed},
      {"ops", state.ops_in_window},
      {"ops_total", state.ops_total},
      {"ops_per_s", elapsed > 0 ? static_cast<double>(state.ops_in_window) / elapsed : 0.0},
      {"p50_us", static_cast<double>(dtrun::bench::percentile(state.latencies_ns, 0.50)) / 1000.0},
      {"p99_us", static_cast<double>(dtrun::bench::percentile(state.latencies_ns, 0.99)) / 1000.0},
      {"cpu_s", load_cpu_s},
      {"background_idle", background_idle},
  };
  if (state.opts.op == "add" && state.adds > 0) {
    try {
      auto counter = read_counter(state);
      out["counter"] = counter;
      if (counter != static_cast<std::int64_t>(state.adds)) {
        state.error(fmt::format("counter is {} after {} ADDs", counter, state.adds));
      }
    } catch (const std::exception& e) {
      state.error(std::string("reading the counter: ") + e.what());
    }
  }
  out["errors"] = state.errors;
  out["first_error"] = state.first_error;
  return out;
}

nlohmann::json run_load(run_state& state) {
  auto& io = state.io;
  asio::steady_timer timer(io);
  std::vector<std::shared_ptr<load_connection>> conns;
  auto connect_start = clock_type::now();
  double connect_s = 0;
  double cpu_at_start = 0;
  auto conn = std::make_shared<connector>(
      state, state.opts.connections, [&](std::vector<tcp::socket>& sockets) {
        connect_s = std::chrono::duration<double>(clock_type::now() - connect_start).count();
        handshake(state, "connected");
        cpu_at_start = cpu_seconds();
        state.start = clock_type::now();
        state.deadline =
            state.start + std::chrono::microseconds(static_cast<long>(state.opts.duration_s * 1e6));
        for (std::size_t i = 0; i < sockets.size(); ++i) {
          conns.push_back(std::make_shared<load_connection>(std::move(sockets[i]), state,
                                                            static_cast<int>(i)));
        }
        if (conns.empty()) {
          io.stop();
          return;
        }
        // The first op to end after the deadline stops them all (see
        // op_done); this timer only gives up on connections that hang.
        timer.expires_at(state.deadline +
                         std::chrono::microseconds(static_cast<long>(state.opts.timeout_s * 1e6)));
        timer.async_wait([&](const boost::system::error_code& ec) {
          if (!ec) io.stop();
        });
        for (auto& c : conns) c->start();
      });
  // Until then, the same limit on connecting.
  timer.expires_after(std::chrono::microseconds(static_cast<long>(state.opts.timeout_s * 1e6)));
  timer.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  // With --background-idle, those connections are opened (and held) first.
  std::vector<tcp::socket> background;
  auto idle_conn = std::make_shared<connector>(
      state, state.opts.background_idle, [&](std::vector<tcp::socket>& sockets) {
        background = std::move(sockets);
        connect_start = clock_type::now();
        conn->start();
      });
  idle_conn->start();
  // run(), not run_for(): run_for reads the clock around every handler.
  io.run();
  timer.cancel();
  const double load_cpu_s = cpu_seconds() - cpu_at_start;
  handshake(state, "finished");
  if (state.running > 0) state.error(fmt::format("{} connections never finished", state.running));
  return load_report(state, conns.size(), connect_s, load_cpu_s, background.size());
}

nlohmann::json run_idle(run_state& state) {
  auto& io = state.io;
  std::vector<tcp::socket>* held = nullptr;
  auto connect_start = clock_type::now();
  double connect_s = 0;
  std::uint64_t answered = 0;
  std::vector<std::array<std::uint8_t, 8>> replies;
  const std::string num_keys(1, static_cast<char>(state.cmd.num_keys));

  auto conn = std::make_shared<connector>(state, state.opts.idle,
                                          [&](std::vector<tcp::socket>& sockets) {
    connect_s = std::chrono::duration<double>(clock_type::now() - connect_start).count();
    held = &sockets;
    // Every connection is open at once now; prove each one is served.
    replies.resize(sockets.size());
    state.running = static_cast<int>(sockets.size());
    if (sockets.empty()) io.stop();
    for (std::size_t i = 0; i < sockets.size(); ++i) {
      auto& s = sockets[i];
      asio::async_write(s, asio::buffer(num_keys), [&, i](const boost::system::error_code& ec,
                                                          std::size_t) {
        if (ec) {
          state.error("write: " + ec.message());
          if (--state.running == 0) io.stop();
          return;
        }
        asio::async_read(sockets[i], asio::buffer(replies[i]),
                         [&](const boost::system::error_code& rec, std::size_t) {
                           if (rec) {
                             state.error("read: " + rec.message());
                           } else {
                             ++answered;
                           }
                           if (--state.running == 0) io.stop();
                         });
      });
    }
  });
  conn->start();
  asio::steady_timer give_up(io, std::chrono::microseconds(
                                     static_cast<long>(state.opts.timeout_s * 1e6)));
  give_up.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  io.run();
  if (state.running > 0) state.error(fmt::format("{} idle connections never answered",
                                                 state.running));
  return nlohmann::json{
      {"idle", state.opts.idle},
      {"connected", held ? held->size() : 0},
      {"connect_s", connect_s},
      {"answered", answered},
      {"errors", state.errors + (state.opts.idle - answered)},
      {"first_error", state.first_error},
  };
}

}  // namespace
}  // namespace dtrun::bench::store_load

int main(int argc, char** argv) {
  namespace bench = dtrun::bench::store_load;
  namespace asio = boost::asio;
  CLI::App app{"store_load: TCPStore load generator"};
  bench::options opts;
  std::string dialect = "v1.13";
  dtrun::bench::add_dialect_option(app, dialect);
  app.add_option("--host", opts.host)->capture_default_str();
  app.add_option("--port", opts.port)->required();
  app.add_option("--connections", opts.connections, "concurrent client connections")
      ->capture_default_str();
  app.add_option("--duration", opts.duration_s, "seconds of load")->capture_default_str();
  app.add_option("--op", opts.op, "setget or add")
      ->check(CLI::IsMember({"setget", "add"}))
      ->capture_default_str();
  app.add_option("--value-bytes", opts.value_bytes, "value size for setget")
      ->capture_default_str();
  app.add_option("--idle", opts.idle, "instead of load: hold this many idle connections");
  app.add_option("--background-idle", opts.background_idle,
                 "with a load: hold this many idle connections open during it");
  app.add_flag("--sync", opts.sync,
               "print connected/finished events and wait for a stdin line after each");
  app.add_option("--connect-concurrency", opts.connect_concurrency,
                 "connects in flight at once")
      ->capture_default_str();
  app.add_option("--timeout", opts.timeout_s, "seconds before giving up on stragglers")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  dtrun::bench::raise_open_file_limit();
  // One thread: no locking in Asio's scheduler and reactor.
  asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  bench::run_state state(io, opts, dtrun::bench::dialect_of(dialect));
  state.run_id = fmt::format("{}-{}", ::getpid(), std::random_device{}());
  try {
    state.endpoint = bench::tcp::endpoint(asio::ip::make_address(opts.host), opts.port);
  } catch (const std::exception& e) {
    std::cerr << "store_load: --host must be an IP address: " << e.what() << '\n';
    return 2;
  }
  auto result = opts.idle > 0 ? bench::run_idle(state) : bench::run_load(state);
  std::cout << result.dump() << std::endl;
  return result["errors"].get<std::uint64_t>() == 0 ? 0 : 1;
}
