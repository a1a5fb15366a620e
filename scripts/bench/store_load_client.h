// store_load's clients (store_load.cpp): the run's shared state, the
// connector that opens connections a bounded number at a time, and the
// connection that runs the timed workload.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/store/wire_codec.h"

namespace dtrun::bench::store_load {

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
command_bytes commands_of(wire::dialect d);

// Request bytes as the 1.13 dialect lays them out (both servers read it):
// written here, not by dtrun's codec, so the same bytes reach both.
inline void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
template <typename T>
void put_raw(std::string& out, T v) {
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  out.append(raw, sizeof(T));
}
inline void put_str(std::string& out, const std::string& s) {
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
  run_state(asio::io_context& context, options o, wire::dialect d);

  void error(const std::string& what) {
    ++errors;
    if (first_error.empty()) first_error = what;
  }

  asio::io_context& io;
  options opts;
  command_bytes cmd;
  std::string validate_bytes;  // empty for 1.13
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

  void start();

 private:
  void next();

  run_state& state_;
  int count_;
  int started_ = 0, finished_ = 0;
  std::function<void(std::vector<tcp::socket>&)> done_;
  std::vector<tcp::socket> sockets_;
};

// One connection running the workload loop.
class load_connection : public std::enable_shared_from_this<load_connection> {
 public:
  load_connection(tcp::socket socket, run_state& state, int id);

  void start();

 private:
  enum class step { wait_reply, get_reply, add_reply };

  void next_op(clock_type::time_point now);
  void request(const std::string& bytes, step expect);
  void read();
  void on_bytes();
  wire::op answered() const;
  void op_done();
  void fail(const std::string& what);
  void finish();

  tcp::socket socket_;
  run_state& state_;
  std::string value_, set_wait_, get_, add_;
  std::vector<std::uint8_t> buffer_;
  std::size_t have_ = 0;
  step expect_ = step::wait_reply;
  clock_type::time_point op_start_;
  bool finished_ = false;
};

}  // namespace dtrun::bench::store_load
