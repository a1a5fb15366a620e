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
// Prints one JSON object on stdout.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
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
using clock_type = std::chrono::steady_clock;

namespace wire = dtrun::rendezvous::wire;

// The command bytes of the dialect in use (--dialect), from the codec the
// server uses, so the two can never disagree. PyTorch 2.x servers also
// expect every connection to open with VALIDATE + magic (`validate_bytes`).
struct command_bytes {
  std::uint8_t set, get, add, wait, num_keys;
};
command_bytes commands_of(wire::dialect d) {
  auto b = [d](wire::op o) { return *wire::byte_for(d, o); };
  return {b(wire::op::set), b(wire::op::get), b(wire::op::add), b(wire::op::wait),
          b(wire::op::num_keys)};
}
command_bytes cmd = commands_of(wire::dialect::v1_13);
std::string validate_bytes;  // empty for 1.13

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
template <typename T>
void put_raw(std::string& out, T v) {
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  out.append(raw, sizeof(T));
}
void put_str(std::string& out, const std::string& s) {
  put_raw<std::uint64_t>(out, s.size());
  out.append(s);
}

struct options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  int connections = 1;
  double duration_s = 3;
  std::string op = "setget";
  std::size_t value_bytes = 64;
  int idle = 0;
  int background_idle = 0;
  bool sync = false;
  int connect_concurrency = 256;
  double timeout_s = 120;
};

// Shared by every connection of a run (one thread, no locks).
struct run_state {
  explicit run_state(asio::io_context& context, options o) : io(context), opts(std::move(o)) {}

  void error(const std::string& what) {
    ++errors;
    if (first_error.empty()) first_error = what;
  }

  asio::io_context& io;
  options opts;
  std::string run_id;
  tcp::endpoint endpoint;
  bool stopping = false;
  clock_type::time_point start, deadline;
  std::uint64_t ops_in_window = 0;  // completed before the deadline
  std::uint64_t ops_total = 0;
  std::uint64_t adds = 0;
  std::uint64_t errors = 0;
  std::string first_error;
  std::vector<std::uint32_t> latencies_ns;  // capped at ~4.3 s, plenty here
  int running = 0;
};

// Opens `count` connections with at most `concurrency` connects in flight
// (a burst of 10,000 SYNs overflows the accept queue of any server), then
// calls `done`.
class connector : public std::enable_shared_from_this<connector> {
 public:
  connector(run_state& state, int count, std::function<void(std::vector<tcp::socket>&)> done)
      : state_(state), count_(count), done_(std::move(done)) {}

  void start() {
    sockets_.reserve(count_);
    int first = std::min(count_, std::max(1, state_.opts.connect_concurrency));
    for (int i = 0; i < first; ++i) next();
    if (count_ == 0) done_(sockets_);
  }

 private:
  void next() {
    if (started_ == count_) return;
    ++started_;
    auto socket = std::make_shared<tcp::socket>(state_.io);
    socket->async_connect(state_.endpoint, [self = shared_from_this(), socket](
                                               const boost::system::error_code& ec) {
      if (ec) {
        self->state_.error("connect: " + ec.message());
      } else {
        socket->set_option(tcp::no_delay(true));
        boost::system::error_code write_error;
        if (!validate_bytes.empty()) asio::write(*socket, asio::buffer(validate_bytes), write_error);
        if (write_error) self->state_.error("handshake: " + write_error.message());
        self->sockets_.push_back(std::move(*socket));
      }
      if (++self->finished_ == self->count_) {
        self->done_(self->sockets_);
      } else {
        self->next();
      }
    });
  }

  run_state& state_;
  int count_;
  int started_ = 0, finished_ = 0;
  std::function<void(std::vector<tcp::socket>&)> done_;
  std::vector<tcp::socket> sockets_;
};

// One connection running the workload loop.
class load_connection : public std::enable_shared_from_this<load_connection> {
 public:
  load_connection(tcp::socket socket, run_state& state, int id)
      : socket_(std::move(socket)), state_(state) {
    const std::string key = fmt::format("/bench/{}/k{}", state_.run_id, id);
    value_ = fmt::format("v{}-", id);
    value_.resize(state_.opts.value_bytes, 'x');
    put_u8(set_wait_, cmd.set);
    put_str(set_wait_, key);
    put_str(set_wait_, value_);
    put_u8(set_wait_, cmd.wait);
    put_raw<std::uint64_t>(set_wait_, 1);
    put_str(set_wait_, key);
    put_u8(get_, cmd.get);
    put_str(get_, key);
    put_u8(add_, cmd.add);
    put_str(add_, fmt::format("/bench/{}/counter", state_.run_id));
    put_raw<std::int64_t>(add_, 1);
    buffer_.resize(std::max<std::size_t>(4096, state_.opts.value_bytes + 64));
  }

  void start() {
    ++state_.running;
    next_op(clock_type::now());
  }

 private:
  enum class step { wait_reply, get_reply, add_reply };

  // `now` doubles as the start of this op: reading the clock is a system
  // call on some virtual machines, so each op reads it once.
  void next_op(clock_type::time_point now) {
    if (state_.stopping) {
      finish();
      return;
    }
    op_start_ = now;
    if (state_.opts.op == "add") {
      request(add_, step::add_reply);
    } else {
      request(set_wait_, step::wait_reply);
    }
  }

  void request(const std::string& bytes, step expect) {
    expect_ = expect;
    have_ = 0;
    asio::async_write(socket_, asio::buffer(bytes),
                      [self = shared_from_this()](const boost::system::error_code& ec,
                                                  std::size_t) {
                        if (ec) return self->fail("write: " + ec.message());
                        self->read();
                      });
  }

  void read() {
    socket_.async_read_some(
        asio::buffer(buffer_.data() + have_, buffer_.size() - have_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (ec) return self->fail("read: " + ec.message());
          self->have_ += n;
          self->on_bytes();
        });
  }

  void on_bytes() {
    // The reply's bytes as the codec defines them (wire::parse_reply).
    auto parsed = wire::parse_reply(answered(), std::span<const std::uint8_t>(buffer_.data(), have_),
                                    1, buffer_.size() - 8);
    if (parsed.status == wire::parse_status::bad) return fail(parsed.error);
    if (parsed.status == wire::parse_status::need_more) return read();
    if (have_ > parsed.consumed) return fail("more reply bytes than requested");
    switch (expect_) {
      case step::wait_reply:
        if (parsed.rep.byte != wire::wait_stop_waiting) {
          return fail(fmt::format("WAIT replied {}", int(parsed.rep.byte)));
        }
        return request(get_, step::get_reply);
      case step::get_reply:
        if (parsed.rep.value != value_) return fail("GET returned a different value");
        return op_done();
      case step::add_reply:
        ++state_.adds;
        return op_done();
    }
  }

  wire::op answered() const {
    switch (expect_) {
      case step::wait_reply: return wire::op::wait;
      case step::get_reply: return wire::op::get;
      case step::add_reply: return wire::op::add;
    }
    return wire::op::wait;
  }

  void op_done() {
    auto now = clock_type::now();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - op_start_).count();
    state_.latencies_ns.push_back(
        static_cast<std::uint32_t>(std::min<long long>(ns, UINT32_MAX)));
    ++state_.ops_total;
    if (now <= state_.deadline) {
      ++state_.ops_in_window;
    } else {
      state_.stopping = true;  // every connection stops after its current op
    }
    next_op(now);
  }

  void fail(const std::string& what) {
    state_.error(what);
    boost::system::error_code ignored;
    socket_.close(ignored);
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    if (--state_.running == 0) state_.io.stop();
  }

  tcp::socket socket_;
  run_state& state_;
  std::string value_, set_wait_, get_, add_;
  std::vector<std::uint8_t> buffer_;
  std::size_t have_ = 0;
  step expect_ = step::wait_reply;
  clock_type::time_point op_start_;
  bool finished_ = false;
};

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
  if (!validate_bytes.empty()) asio::write(socket, asio::buffer(validate_bytes));
  std::string req;
  put_u8(req, cmd.add);
  put_str(req, fmt::format("/bench/{}/counter", state.run_id));
  put_raw<std::int64_t>(req, 0);
  asio::write(socket, asio::buffer(req));
  std::int64_t value = 0;
  asio::read(socket, asio::buffer(&value, sizeof value));
  return value;
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

  auto elapsed = std::chrono::duration<double>(state.deadline - state.start).count();
  std::sort(state.latencies_ns.begin(), state.latencies_ns.end());
  nlohmann::json out{
      {"op", state.opts.op},
      {"connections", state.opts.connections},
      {"connected", conns.size()},
      {"connect_s", connect_s},
      {"seconds", elapsed},
      {"ops", state.ops_in_window},
      {"ops_total", state.ops_total},
      {"ops_per_s", elapsed > 0 ? static_cast<double>(state.ops_in_window) / elapsed : 0.0},
      {"p50_us", static_cast<double>(dtrun::bench::percentile(state.latencies_ns, 0.50)) / 1000.0},
      {"p99_us", static_cast<double>(dtrun::bench::percentile(state.latencies_ns, 0.99)) / 1000.0},
      {"cpu_s", load_cpu_s},
      {"background_idle", background.size()},
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

nlohmann::json run_idle(run_state& state) {
  auto& io = state.io;
  std::vector<tcp::socket>* held = nullptr;
  auto connect_start = clock_type::now();
  double connect_s = 0;
  std::uint64_t answered = 0;
  std::vector<std::array<std::uint8_t, 8>> replies;
  const std::string num_keys(1, static_cast<char>(cmd.num_keys));

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

int main(int argc, char** argv) {
  CLI::App app{"store_load: TCPStore load generator"};
  options opts;
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
  cmd = commands_of(dtrun::bench::dialect_of(dialect));
  validate_bytes = dtrun::bench::validate_bytes(dtrun::bench::dialect_of(dialect));

  dtrun::bench::raise_open_file_limit();
  // One thread: no locking in Asio's scheduler and reactor.
  asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  run_state state(io, opts);
  state.run_id = fmt::format("{}-{}", ::getpid(), std::random_device{}());
  try {
    state.endpoint = tcp::endpoint(asio::ip::make_address(opts.host), opts.port);
  } catch (const std::exception& e) {
    std::cerr << "store_load: --host must be an IP address: " << e.what() << '\n';
    return 2;
  }
  auto result = opts.idle > 0 ? run_idle(state) : run_load(state);
  std::cout << result.dump() << std::endl;
  return result["errors"].get<std::uint64_t>() == 0 ? 0 : 1;
}
