#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>

#include "agent/monitor/metrics_server.h"

using namespace dtrun::agent;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A server on its own io_context thread; the test talks to it with
// blocking sockets.
struct running_server {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::unique_ptr<metrics_server> server;
  std::thread thread;
  std::vector<std::string> logged;

  explicit running_server(metrics_server_options options = {}) {
    server = std::make_unique<metrics_server>(
        io, options, [] { return std::string("dtrun_up 1\n"); },
        [] { return std::string(R"({"schema":"dtrun.status/1"})"); },
        [this](const std::string& line) { logged.push_back(line); });
    work.emplace(io.get_executor());
    thread = std::thread([this] { io.run(); });
  }
  ~running_server() {
    work.reset();
    asio::post(io, [this] { server.reset(); });
    thread.join();
  }
  std::uint16_t port() const { return server->port(); }
};

tcp::socket connect_to(asio::io_context& io, std::uint16_t port) {
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  return s;
}

// Everything the server sends until it closes (or `until` appears).
std::string read_all(tcp::socket& s, const std::string& until = "") {
  std::string out;
  char buf[4096];
  boost::system::error_code ec;
  while (true) {
    std::size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

std::string request(std::uint16_t port, const std::string& raw) {
  asio::io_context io;
  auto s = connect_to(io, port);
  asio::write(s, asio::buffer(raw));
  return read_all(s);
}

std::string get(std::uint16_t port, const std::string& target) {
  return request(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

bool closed_within(tcp::socket& s, std::chrono::milliseconds limit) {
  // A blocking read returns when the server closes; run it on a thread so
  // a server that never closes fails the test instead of hanging it.
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread reader([&] {
    read_all(s);
    done.set_value();
  });
  bool ok = finished.wait_for(limit) == std::future_status::ready;
  if (!ok) {
    boost::system::error_code ignored;
    s.shutdown(tcp::socket::shutdown_both, ignored);
  }
  reader.join();
  return ok;
}

}  // namespace

TEST_CASE("metrics server serves /metrics and /status with their content types") {
  running_server srv;
  REQUIRE(srv.port() != 0);
  auto metrics = get(srv.port(), "/metrics");
  CHECK(metrics.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(metrics.find("\r\n\r\ndtrun_up 1\n") != std::string::npos);
  auto status = get(srv.port(), "/status?x=1");
  CHECK(status.find("Content-Type: application/json") != std::string::npos);
  CHECK(status.find(R"({"schema":"dtrun.status/1"})") != std::string::npos);
}

TEST_CASE("metrics server answers 404 for other paths and 405 for other methods") {
  running_server srv;
  CHECK(get(srv.port(), "/").rfind("HTTP/1.1 404", 0) == 0);
  auto post = request(srv.port(), "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(post.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(post.find("Allow: GET, HEAD") != std::string::npos);
}

TEST_CASE("metrics server refuses a body and an oversized header") {
  running_server srv;
  auto body = request(srv.port(),
                      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(body.rfind("HTTP/1.1 413", 0) == 0);
  auto big = request(srv.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                     std::string(9000, 'a') + "\r\n\r\n");
  CHECK(big.rfind("HTTP/1.1 431", 0) == 0);
  CHECK(request(srv.port(), "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
}

TEST_CASE("metrics server keeps a connection alive across requests") {
  running_server srv;
  asio::io_context io;
  auto s = connect_to(io, srv.port());
  for (int i = 0; i < 3; ++i) {
    asio::write(s, asio::buffer(std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")));
    auto reply = read_all(s, "dtrun_up 1\n");
    CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  }
}

TEST_CASE("metrics server closes a client that never sends") {
  running_server srv(metrics_server_options{.read_timeout = std::chrono::milliseconds(300)});
  asio::io_context io;
  auto idle = connect_to(io, srv.port());
  CHECK(closed_within(idle, std::chrono::seconds(5)));
  // Half a request, then silence: closed too.
  auto slow = connect_to(io, srv.port());
  asio::write(slow, asio::buffer(std::string("GET /metrics HTTP/1.1\r\nHo")));
  CHECK(closed_within(slow, std::chrono::seconds(5)));
}

TEST_CASE("metrics server closes connections over its limit and still serves") {
  running_server srv(metrics_server_options{.max_connections = 4});
  asio::io_context io;
  std::vector<tcp::socket> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect_to(io, srv.port()));
  // The server accepts in the order the connections came: the fifth finds
  // four open.
  auto extra = connect_to(io, srv.port());
  CHECK(closed_within(extra, std::chrono::seconds(30)));
  // Each held one asks to be closed; its end of stream comes after the
  // server dropped it, so the next connection finds room.
  for (auto& s : held) {
    asio::write(s, asio::buffer(std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                            "Connection: close\r\n\r\n")));
    CHECK(closed_within(s, std::chrono::seconds(30)));
  }
  CHECK(get(srv.port(), "/metrics").find("dtrun_up 1") != std::string::npos);
}

TEST_CASE("a callback that throws answers 500 and the server goes on") {
  asio::io_context io;
  metrics_server server(
      io, "127.0.0.1", 0, []() -> std::string { throw std::runtime_error("no status yet"); },
      [] { return std::string("{}"); }, [](const std::string&) {});
  std::string reply;
  std::atomic<bool> done{false};
  std::thread client([&] {
    reply = get(server.port(), "/metrics");
    done = true;
  });
  while (!done) io.run_for(std::chrono::milliseconds(10));
  client.join();
  CHECK(reply.rfind("HTTP/1.1 500", 0) == 0);
  CHECK(reply.find("no status yet") != std::string::npos);
}

TEST_CASE("binding a port in use is one clear line") {
  asio::io_context io;
  metrics_server first(io, "127.0.0.1", 0, [] { return std::string(); },
                       [] { return std::string(); }, [](const std::string&) {});
  try {
    metrics_server second(io, "127.0.0.1", first.port(), [] { return std::string(); },
                          [] { return std::string(); }, [](const std::string&) {});
    FAIL("bound twice");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) ==
          "--metrics-port " + std::to_string(first.port()) + ": address in use; pick a free port or 0");
  }
}

TEST_CASE("metrics server: a failed accept (out of file descriptors) is retried later") {
  // The refused connection stays queued: an accept again at once fails
  // again at once, a busy loop that also writes a line each time.
  asio::io_context io;
  int failures = 0;
  metrics_server server(io, "127.0.0.1", 0, [] { return std::string(); },
                        [] { return std::string(); }, [&](const std::string& line) {
                          if (line.find("accept failed") != std::string::npos) ++failures;
                        });
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(server.port());
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  int open_now = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++open_now;
  }
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_now + 8);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  // Our clients take every descriptor left (the kernel completes their
  // connections), so none is left to accept them.
  std::vector<int> clients;
  for (int fd; (fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0;) {
    clients.push_back(fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) break;
  }
  for (int i = 0; i < 200; ++i) io.poll_one();
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old) == 0);
  for (int fd : clients) ::close(fd);
  CHECK(!clients.empty());
  CHECK(failures >= 1);
  CHECK(failures < 10);  // a busy loop fails about every other poll_one()
}
