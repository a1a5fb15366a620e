// The server over real sockets, with raw byte-level clients where the
// behaviour is about bytes: bad input, pipelining, cancelled and abandoned
// waits, the 1.13 watch stream.
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "server_fixture.h"
#include "tests/unit/rendezvous/dialect_names.h"

using namespace dtrun::rendezvous;
using boost::asio::ip::tcp;

namespace {

// A blocking socket with a receive timeout, so a broken server fails the
// test instead of hanging it.
class raw_client {
 public:
  explicit raw_client(std::uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  void send(const std::string& bytes) { boost::asio::write(socket_, boost::asio::buffer(bytes)); }

  void send(wire::dialect d, const wire::request& r) { send(wire::encode_request(d, r)); }

  std::string read(std::size_t n) {
    std::string out(n, '\0');
    boost::asio::read(socket_, boost::asio::buffer(out));
    return out;
  }

  std::uint8_t read_u8() { return static_cast<std::uint8_t>(read(1)[0]); }

  std::int64_t read_i64() {
    auto raw = read(8);
    std::int64_t v;
    std::memcpy(&v, raw.data(), 8);
    return v;
  }

  std::string read_bytes() {
    auto raw = read(8);
    std::uint64_t n;
    std::memcpy(&n, raw.data(), 8);
    return read(n);
  }

  // True when the server closed the connection (EOF or reset).
  bool closed_by_server() {
    char c;
    boost::system::error_code ec;
    socket_.read_some(boost::asio::buffer(&c, 1), ec);
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

  void close() { socket_.close(); }

 private:
  boost::asio::io_context io_;
  tcp::socket socket_;
};

using testing::v1;
using testing::v2;

void validate(raw_client& c) { c.send(v2, {.kind = wire::op::validate, .nonce = wire::validation_magic}); }

}  // namespace

TEST_CASE("bad input closes only the offending connection") {
  std::vector<std::string> log;
  testing::server_thread server({.host = "127.0.0.1", .limits = {.max_value_bytes = 1024}});
  auto good = server.client(v1);
  good->set("kept", "safe");

  std::vector<std::string> garbage = {
      std::string("\x09", 1),                                   // unknown 1.13 command
      std::string("\x00\x05\x00\x00\x00\x00\x00\x00", 8) + "k" +  // SET whose key length
          std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8),     // has a text high byte
      std::string("\x04\xff\xff\xff\xff\xff\xff\xff\xff", 9),     // CHECK with 2^64-1 keys
  };
  for (const auto& bytes : garbage) {
    raw_client evil(server.port());
    evil.send(bytes);
    CHECK(evil.closed_by_server());
  }
  SECTION("oversized value with the 1.13 framing") {
    raw_client evil(server.port());
    std::string big_set;
    wire::put_u8(big_set, 0);
    wire::put_bytes(big_set, "k");
    wire::put_u64(big_set, 4096);  // over the 1 KiB cap of this server
    evil.send(big_set);
    CHECK(evil.closed_by_server());
  }
  SECTION("a 2.x client must validate first") {
    raw_client evil(server.port());
    validate(evil);
    evil.send(v2, {.kind = wire::op::validate, .nonce = wire::validation_magic});
    CHECK(evil.closed_by_server());
  }
  SECTION("ADD on text closes the connection but keeps the value") {
    raw_client evil(server.port());
    evil.send(v1, {.kind = wire::op::add, .keys = {"/kept"}, .number = 1});
    CHECK(evil.closed_by_server());
  }
  CHECK(good->get("kept") == "safe");
  CHECK(server.stats().connections_rejected >= 3);
}

TEST_CASE("pipelined requests are answered in order") {
  testing::server_thread server;
  raw_client c(server.port());
  std::string batch;
  batch += wire::encode_request(v1, {.kind = wire::op::add, .keys = {"n"}, .number = 2});
  batch += wire::encode_request(v1, {.kind = wire::op::set, .keys = {"s"}, .values = {"v"}});
  batch += wire::encode_request(v1, {.kind = wire::op::get, .keys = {"s"}});
  batch += wire::encode_request(v1, {.kind = wire::op::add, .keys = {"n"}, .number = 3});
  batch += wire::encode_request(v1, {.kind = wire::op::num_keys});
  // One byte at a time: the server must parse a stream, not packets.
  for (char ch : batch) c.send(std::string(1, ch));
  CHECK(c.read_i64() == 2);
  CHECK(c.read_bytes() == "v");
  CHECK(c.read_i64() == 5);
  CHECK(c.read_i64() == 2);
}

TEST_CASE("2.x ping, cancel_wait and queues") {
  testing::server_thread server;
  raw_client c(server.port());
  validate(c);
  c.send(v2, {.kind = wire::op::ping, .nonce = 1234});
  CHECK(c.read(4) == std::string("\xd2\x04\x00\x00", 4));

  c.send(v2, {.kind = wire::op::wait, .keys = {"never"}});
  c.send(v2, {.kind = wire::op::cancel_wait});
  CHECK(c.read_u8() == wire::wait_canceled);
  // The cancelled wait must not answer later.
  c.send(v2, {.kind = wire::op::set, .keys = {"never"}, .values = {"now"}});
  c.send(v2, {.kind = wire::op::queue_len, .keys = {"q"}});
  CHECK(c.read_i64() == 0);

  c.send(v2, {.kind = wire::op::queue_push, .keys = {"q"}, .values = {"job"}});
  c.send(v2, {.kind = wire::op::wait, .keys = {"q"}});
  CHECK(c.read_u8() == wire::wait_stop_waiting);
  c.send(v2, {.kind = wire::op::queue_pop, .keys = {"q"}});
  CHECK(c.read_i64() == 1);
  CHECK(c.read_bytes() == "job");
  c.send(v2, {.kind = wire::op::list_keys});
  CHECK(c.read_i64() == 1);
  CHECK(c.read_bytes() == "never");
}

TEST_CASE("a client that vanishes mid-wait is forgotten, and others are still woken") {
  testing::server_thread server;
  {
    raw_client quitter(server.port());
    quitter.send(v1, {.kind = wire::op::wait, .keys = {"k"}});
    quitter.close();
  }
  raw_client stayer(server.port());
  stayer.send(v1, {.kind = wire::op::wait, .keys = {"k"}});
  auto writer = server.client(v1, "");
  writer->set("k", "v");
  CHECK(stayer.read_u8() == wire::wait_stop_waiting);
  // The server dropped the quitter: only the stayer and writer remain.
  CHECK(server.stats().connections_open == 2);
}

TEST_CASE("1.13 watch_key streams changes") {
  testing::server_thread server;
  raw_client watcher(server.port());
  watcher.send(v1, {.kind = wire::op::watch_key, .keys = {"/w"}});
  CHECK(watcher.read_u8() == wire::watch_callback_registered);
  auto writer = server.client(v1);
  writer->set("w", "1");
  CHECK(watcher.read_u8() == wire::watch_key_created);
  CHECK(watcher.read_bytes() == "/w");
  CHECK(watcher.read_bytes() == "");
  CHECK(watcher.read_bytes() == "1");
}

TEST_CASE("a value larger than the read buffer arrives whole") {
  testing::server_thread server;
  auto c = server.client();
  std::string big(5 * 1024 * 1024 + 3, 'x');
  big[12345] = '\0';
  c->set("big", big);
  CHECK(c->get("big") == big);
}

TEST_CASE("binding a port in use says what to do") {
  testing::server_thread first;
  boost::asio::io_context io;
  try {
    store_server second(io, {.host = "127.0.0.1", .port = first.port()});
    FAIL("second server bound a port in use");
  } catch (const store_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("in use") && Catch::Contains("choose another port"));
  }
}

TEST_CASE("a client gives up on an unreachable store with a clear error") {
  testing::refusing_port refusing;
  auto unused_port = refusing.port();
  tcp_store_client_options options;
  options.port = unused_port;
  options.connect_timeout = std::chrono::milliseconds(300);
  try {
    tcp_store_client client(options);
    FAIL("connected to a closed port");
  } catch (const store_timeout& e) {
    CHECK_THAT(e.what(), Catch::Contains("could not reach the store") &&
                             Catch::Contains(std::to_string(unused_port)));
  }
}

TEST_CASE("a last will fires when its connection closes, and only then") {
  testing::server_thread server;
  auto watcher = server.client();
  {
    auto dying = server.client();
    dying->set("dtrun/will/node3", "/round/1/over\nnode 3 lost");
    // Withdrawn wills do not fire.
    dying->set("dtrun/will/withdrawn", "/never\nx");
    dying->delete_key("dtrun/will/withdrawn");
    // A value without a target is an ordinary key.
    dying->set("dtrun/will/plain", "no newline");
    CHECK(dying->get("dtrun/will/node3") == "/round/1/over\nnode 3 lost");
  }  // the connection closes here
  CHECK(watcher->get("round/1/over") == "node 3 lost");
  CHECK_FALSE(watcher->check({"dtrun/will/node3"}));
  CHECK_FALSE(watcher->check({"never"}));
  CHECK(watcher->get("dtrun/will/plain") == "no newline");
}

TEST_CASE("a last will does not overwrite a reason its target already holds") {
  testing::server_thread server;
  auto watcher = server.client();
  {
    auto failing = server.client();
    failing->set("dtrun/will/node1", "/round/2/over\nnode 1 was lost");
    // A second will on a fresh key: the server runs a connection's wills
    // together, so once it is set the first one has been run too.
    failing->set("dtrun/will/marker", "/round/2/marker\nran");
    // The node ends the round itself (its worker failed), then its
    // connection closes with the will still set.
    failing->set("round/2/over", "node 1: worker rank 1 was killed by signal 9");
  }
  CHECK(watcher->get("round/2/marker") == "ran");
  CHECK(watcher->get("round/2/over") == "node 1: worker rank 1 was killed by signal 9");
  CHECK_FALSE(watcher->check({"dtrun/will/node1"}));
}
