// store_barrier: --ranks ranks of a --world N job doing, against one
// TCPStore server, what init_process_group and torch's store-based barrier
// do to it; scripts/bench/store-barrier spreads the N ranks over several of
// these processes and compares dtrun's store with torch's.
//
// Each rank i (i = --first-rank + its index here) has its own connection
// and, as a torch client does, one request in flight on it at a time
// (SET has no reply, so SET and the request after it go out together):
//   hello  what a torch client does on connecting: for 2.x VALIDATE + PING,
//          the PING's echo awaited; then, in both dialects, the ADD of
//          1 to <prefix>/init that a TCPStore made with a world size
//          (as init_process_group makes it) does (torch's waitForWorkers).
//          It also proves the server has accepted the connection, so
//          `ready` leaves no accept backlog inside the measurement.
//          (1.13's clients open a second, "callback" connection, idle
//          here; it is left out, halving the descriptors 16,000 ranks need.)
//   SET    <prefix>/addr/<i> = a ~20-byte address            (no reply)
//   ADD    <prefix>/arrived += 1                             -> i64
//          the rank whose ADD returns N: SET <prefix>/last   (no reply)
//   WAIT   <prefix>/last                                     -> u8
//   get    <prefix>/addr/0 as torch's get() does it: WAIT, then GET,
//          and the value checked against rank 0's
//
// Protocol with the driver, on stdin/stdout: every connection is opened and
// its hello done, then `ready` is printed; on a `go` line every rank runs
// the steps above; then one JSON line (times are CLOCK_MONOTONIC ns, which
// every process on the machine shares, so the driver can take the wall
// time across processes); then the connections are held, as a job holds
// its store connections, until stdin closes. A failure to connect prints
// the JSON line at once instead of `ready`.
//
// One thread, one Boost.Asio event loop, no sleeps. Every failure
// (refused, closed, unexpected reply, --timeout) is counted in `errors`,
// the first one's text in `first_error`; the exit status is 1 then.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/store/wire_codec.h"
#include "scripts/bench/store_bench.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
namespace wire = dtrun::rendezvous::wire;
using wire::op;

struct options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  int world = 0;
  int first_rank = 0;
  int ranks = 0;
  std::string prefix = "initpg";
  double timeout_s = 120;
  int connect_concurrency = 256;
};

// CLOCK_MONOTONIC explicitly (not steady_clock, whose epoch the standard
// leaves open): the driver compares these stamps across processes.
std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The address rank i publishes (what init_process_group's ranks exchange).
std::string address_of(int rank) { return fmt::format("10.{}.{}.{}:29500", rank >> 16 & 255,
                                                      rank >> 8 & 255, rank & 255); }

// Shared by every rank of this process (one thread, no locks).
struct run_state {
  run_state(asio::io_context& context, options o, wire::dialect d)
      : io(context), opts(std::move(o)), dialect(d) {}

  void error(const std::string& what) {
    ++errors;
    if (first_error.empty()) first_error = what;
  }
  // One rank ended the current phase (done or failed); the last one ends
  // the phase's io.run().
  void phase_done() {
    if (on_rank_done) on_rank_done();
    if (--pending == 0) io.stop();
  }
  std::string encode(const wire::request& r) const { return wire::encode_request(dialect, r); }
  std::string key(const std::string& name) const { return opts.prefix + "/" + name; }

  asio::io_context& io;
  options opts;
  wire::dialect dialect;
  tcp::endpoint endpoint;
  std::uint32_t ping_nonce = wire::handshake_nonce(static_cast<std::uint32_t>(::getpid()));
  int pending = 0;                     // ranks yet to end this phase
  std::function<void()> on_rank_done;  // phase 1: opens the next connection
  std::int64_t go_ns = 0, last_done_ns = 0;
  std::vector<std::uint32_t> latencies_us;  // go -> the rank's GET reply
  std::uint64_t errors = 0;
  std::string first_error;
};

class rank_client : public std::enable_shared_from_this<rank_client> {
 public:
  rank_client(run_state& state, int rank) : state_(state), rank_(rank), socket_(state.io) {}

  // Phase 1: connect and say hello; state.phase_done() when done or failed.
  void connect() {
    socket_.async_connect(state_.endpoint,
                          [self = shared_from_this()](const boost::system::error_code& ec) {
                            if (ec) return self->fail("connect: " + ec.message());
                            boost::system::error_code ignored;
                            self->socket_.set_option(tcp::no_delay(true), ignored);
                            if (self->state_.dialect == wire::dialect::v1_13) {
                              return self->send_init();  // 1.13 has no handshake
                            }
                            self->send(dtrun::bench::validate_bytes(self->state_.dialect) +
                                           self->state_.encode({.kind = op::ping,
                                                                .nonce = self->state_.ping_nonce}),
                                       step::ping);
                          });
  }

  // Phase 2: the init_process_group + barrier pattern, from `go`.
  void run() {
    finished_ = false;
    auto bytes = state_.encode({.kind = op::set,
                                .keys = {state_.key(fmt::format("addr/{}", rank_))},
                                .values = {address_of(rank_)}});
    bytes += state_.encode({.kind = op::add, .keys = {state_.key("arrived")}, .number = 1});
    send(std::move(bytes), step::add);
  }

  bool failed() const { return failed_; }
  bool finished() const { return finished_; }

  // --timeout: counted as this rank's failure, naming where it was stuck.
  void time_out() {
    fail(fmt::format("timeout: rank {} still waiting for its {} after {:g} s", rank_,
                     step_name(), state_.opts.timeout_s));
  }

 private:
  enum class step { connect, ping, init, add, wait_last, wait_master, get_master };

  void send_init() {
    send(state_.encode({.kind = op::add, .keys = {state_.key("init")}, .number = 1}),
         step::init);
  }

  const char* step_name() const {
    switch (expect_) {
      case step::connect: return "connect";
      case step::ping: return "PING";
      case step::init: return "ADD(init)";
      case step::add: return "ADD";
      case step::wait_last: return "WAIT(last)";
      case step::wait_master: return "WAIT(addr/0)";
      case step::get_master: return "GET(addr/0)";
    }
    return "?";
  }

  // Writes `bytes`, then reads the reply `expect` needs.
  void send(std::string bytes, step expect) {
    expect_ = expect;
    have_ = 0;
    out_ = std::move(bytes);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](const boost::system::error_code& ec,
                                                  std::size_t) {
                        if (ec) return self->fail(fmt::format("write before {}: {}",
                                                              self->step_name(), ec.message()));
                        self->read();
                      });
  }

  void read() {
    socket_.async_read_some(
        asio::buffer(buffer_.data() + have_, buffer_.size() - have_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (ec) return self->fail(fmt::format("read of the {} reply: {}", self->step_name(),
                                                ec.message()));
          self->have_ += n;
          self->on_bytes();
        });
  }

  // The op whose reply the current step awaits.
  op answered() const {
    switch (expect_) {
      case step::connect:
      case step::ping: return op::ping;
      case step::init:
      case step::add: return op::add;
      case step::wait_last:
      case step::wait_master: return op::wait;
      case step::get_master: return op::get;
    }
    return op::ping;
  }

  void on_bytes() {
    // The reply's bytes as the codec defines them (wire::parse_reply).
    auto parsed = wire::parse_reply(answered(), std::span<const std::uint8_t>(buffer_.data(), have_),
                                    1, buffer_.size() - 8);
    if (parsed.status == wire::parse_status::bad) {
      return fail(fmt::format("{} reply: {}", step_name(), parsed.error));
    }
    if (parsed.status == wire::parse_status::need_more) return read();
    // One request in flight: anything beyond its reply is a protocol error.
    if (have_ > parsed.consumed) {
      return fail(fmt::format("{} more bytes than the {} reply", have_ - parsed.consumed,
                              step_name()));
    }
    const auto& reply = parsed.rep;
    switch (expect_) {
      case step::connect:
      case step::ping: {
        if (reply.nonce != state_.ping_nonce) return fail("the PING after VALIDATE was not echoed");
        return send_init();
      }
      case step::init:
        if (!counts_a_rank(reply.number, "ADD(init)")) return;
        return step_done();
      case step::add: {
        const std::int64_t arrived = reply.number;
        if (!counts_a_rank(arrived, "ADD")) return;
        const auto wait_last = state_.encode({.kind = op::wait, .keys = {state_.key("last")}});
        if (arrived < state_.opts.world) return send(wait_last, step::wait_last);
        // The last to arrive releases everyone, itself included.
        return send(state_.encode({.kind = op::set, .keys = {state_.key("last")},
                                   .values = {"1"}}) + wait_last,
                    step::wait_last);
      }
      case step::wait_last:
      case step::wait_master:
        if (reply.byte != wire::wait_stop_waiting) {
          return fail(fmt::format("{} replied {}", step_name(), int(reply.byte)));
        }
        if (expect_ == step::wait_master) {
          return send(state_.encode({.kind = op::get, .keys = {state_.key("addr/0")}}),
                      step::get_master);
        }
        // torch's get() is a WAIT for the key, then the GET.
        return send(state_.encode({.kind = op::wait, .keys = {state_.key("addr/0")}}),
                    step::wait_master);
      case step::get_master: {
        const auto master = address_of(0);
        if (reply.value != master) {
          return fail(fmt::format("GET addr/0 returned {} bytes, not rank 0's address",
                                  reply.value.size()));
        }
        const auto now = monotonic_ns();
        state_.latencies_us.push_back(static_cast<std::uint32_t>((now - state_.go_ns) / 1000));
        state_.last_done_ns = std::max(state_.last_done_ns, now);
        return step_done();
      }
    }
  }

  // An ADD that counts ranks answers 1..world; anything else means another
  // run's keys (a reused prefix). Fails the rank and returns false then.
  bool counts_a_rank(std::int64_t arrived, const char* what) {
    if (arrived >= 1 && arrived <= state_.opts.world) return true;
    fail(fmt::format("{} returned {} in a world of {} (a key prefix reused?)", what, arrived,
                     state_.opts.world));
    return false;
  }

  void step_done() {
    if (finished_) return;
    finished_ = true;
    state_.phase_done();
  }

  void fail(const std::string& what) {
    if (finished_) return;  // a late completion after a timeout counted it
    failed_ = true;
    state_.error(what);
    boost::system::error_code ignored;
    socket_.close(ignored);
    step_done();
  }

  run_state& state_;
  int rank_;
  tcp::socket socket_;
  std::string out_;
  std::array<std::uint8_t, 256> buffer_{};
  std::size_t have_ = 0;
  step expect_ = step::connect;
  bool finished_ = false;
  bool failed_ = false;
};

// Runs io until every rank ended the phase or --timeout passed; ranks still
// unfinished then are failed as timed out.
void run_phase(run_state& state, std::vector<std::shared_ptr<rank_client>>& ranks) {
  asio::steady_timer give_up(state.io, std::chrono::microseconds(
                                           static_cast<long>(state.opts.timeout_s * 1e6)));
  give_up.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    state.on_rank_done = nullptr;  // no new connects once timed out
    for (auto& r : ranks) {
      if (!r->finished()) r->time_out();
    }
    state.io.stop();
  });
  if (state.pending > 0) state.io.run();
  give_up.cancel();
  state.io.restart();
  state.io.poll();  // the cancelled handlers (timer, closed sockets) before `give_up` goes
  state.io.restart();
}

nlohmann::json result(const run_state& state, std::int64_t connect_ns, int connected) {
  auto sorted = state.latencies_us;
  std::sort(sorted.begin(), sorted.end());
  return nlohmann::json{
      {"world", state.opts.world},
      {"first_rank", state.opts.first_rank},
      {"ranks", state.opts.ranks},
      {"connected", connected},
      {"connect_s", static_cast<double>(connect_ns) / 1e9},
      {"start_ns", state.go_ns},
      {"end_ns", state.last_done_ns},
      {"completed", sorted.size()},
      {"p50_us", dtrun::bench::percentile(sorted, 0.50)},
      {"p99_us", dtrun::bench::percentile(sorted, 0.99)},
      {"max_us", sorted.empty() ? 0u : sorted.back()},
      {"latencies_us", state.latencies_us},
      {"errors", state.errors},
      {"first_error", state.first_error},
  };
}

// The flags, checked; an exit code when the process should stop here
// (--help, a wrong flag, ranks outside the world, too few descriptors).
std::optional<int> parse_flags(int argc, char** argv, options& opts, std::string& dialect) {
  CLI::App app{"store_barrier: N ranks' init_process_group + store barrier against a TCPStore"};
  dtrun::bench::add_dialect_option(app, dialect);
  app.add_option("--host", opts.host)->capture_default_str();
  app.add_option("--port", opts.port)->required();
  app.add_option("--world", opts.world, "N, the job's world size")->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--ranks", opts.ranks, "ranks this process runs")->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--first-rank", opts.first_rank, "global rank of this process's first")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--prefix", opts.prefix, "key prefix, one per run (keys never collide)")
      ->capture_default_str();
  app.add_option("--timeout", opts.timeout_s, "seconds each phase may take")
      ->capture_default_str();
  app.add_option("--connect-concurrency", opts.connect_concurrency,
                 "connects in flight at once (a burst of thousands overflows a server's "
                 "accept queue)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (opts.first_rank + opts.ranks > opts.world) {
    std::cerr << fmt::format("store_barrier: ranks {}..{} are outside a world of {}\n",
                             opts.first_rank, opts.first_rank + opts.ranks - 1, opts.world);
    return 2;
  }
  const auto files = dtrun::bench::raise_open_file_limit();
  if (static_cast<rlim_t>(opts.ranks) + 16 > files) {
    std::cerr << fmt::format("store_barrier: {} ranks need {} file descriptors, the limit is "
                             "{}; use fewer --ranks per process\n",
                             opts.ranks, opts.ranks + 16, files);
    return 2;
  }
  return std::nullopt;
}

// Phase 1: connect and hello, at most --connect-concurrency at a time:
// each rank ending its hello opens the next connection. Returns how long
// it took.
std::int64_t connect_ranks(run_state& state, std::vector<std::shared_ptr<rank_client>>& ranks) {
  const auto connect_start = monotonic_ns();
  std::size_t next = 0;
  state.on_rank_done = [&] {
    if (next < ranks.size()) ranks[next++]->connect();
  };
  state.pending = state.opts.ranks;
  for (int i = 0; i < std::min(state.opts.ranks, state.opts.connect_concurrency); ++i) {
    ranks[next++]->connect();
  }
  run_phase(state, ranks);
  state.on_rank_done = nullptr;
  return monotonic_ns() - connect_start;
}

// Phase 2: every rank at once, from one instant.
void run_barrier(run_state& state, std::vector<std::shared_ptr<rank_client>>& ranks) {
  state.go_ns = monotonic_ns();
  state.last_done_ns = state.go_ns;
  state.pending = state.opts.ranks;
  for (auto& r : ranks) r->run();
  run_phase(state, ranks);
}

}  // namespace

int main(int argc, char** argv) {
  options opts;
  std::string dialect = "v1.13";
  if (auto code = parse_flags(argc, argv, opts, dialect)) return *code;

  // One thread: no locking in Asio's scheduler and reactor.
  asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  run_state state(io, opts, dtrun::bench::dialect_of(dialect));
  try {
    state.endpoint = tcp::endpoint(asio::ip::make_address(opts.host), opts.port);
  } catch (const std::exception& e) {
    std::cerr << "store_barrier: --host must be an IP address: " << e.what() << '\n';
    return 2;
  }
  std::vector<std::shared_ptr<rank_client>> ranks;
  for (int i = 0; i < opts.ranks; ++i) {
    ranks.push_back(std::make_shared<rank_client>(state, opts.first_rank + i));
  }

  const auto connect_ns = connect_ranks(state, ranks);
  const int connected = static_cast<int>(
      std::count_if(ranks.begin(), ranks.end(), [](auto& r) { return !r->failed(); }));
  if (state.errors > 0) {
    // The barrier cannot complete without every rank: report now.
    std::cout << result(state, connect_ns, connected).dump() << std::endl;
    return 1;
  }
  std::cout << "ready" << std::endl;

  std::string line;
  if (!std::getline(std::cin, line) || line != "go") {
    std::cerr << "store_barrier: expected `go` on stdin, got "
              << (std::cin ? "'" + line + "'" : std::string("end of input")) << '\n';
    return 2;
  }
  run_barrier(state, ranks);
  auto out = result(state, connect_ns, connected);
  std::cout << out.dump() << std::endl;
  // Hold the connections, as a job holds its store's, until the driver has
  // every process's result: a process closing 4,000 connections would
  // otherwise load the server while others are still measured.
  while (std::getline(std::cin, line)) {
  }
  return state.errors == 0 ? 0 : 1;
}
