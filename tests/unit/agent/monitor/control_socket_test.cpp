#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/monitor/control_client.h"
#include "agent/monitor/control_dir.h"
#include "agent/monitor/control_socket.h"

using namespace dtrun::agent;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    char templ[] = "/tmp/dtrun_ctl_XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~temp_dir() { fs::remove_all(path); }
};

// An agent-like server on its own io_context thread. "status" is
// answered at once, "stacks" after 100 ms (as a real one answers later).
struct running_control {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::unique_ptr<control_socket> socket;
  std::thread thread;

  explicit running_control(const std::string& dir) {
    socket = std::make_unique<control_socket>(
        io, dir,
        [this](const nlohmann::json& request, control_socket::respond_fn respond) {
          if (request["op"] == "status") return respond({{"schema", "dtrun.status/1"}, {"run_id", "r1"}});
          if (request["op"] == "throw") throw std::runtime_error("handler failed");
          auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
          timer->async_wait([timer, respond](boost::system::error_code) {
            respond({{"ok", true}, {"summary", "line1\nline2"}, {"files", {"/tmp/a"}}});
            respond({{"ok", "twice"}});  // ignored
          });
        },
        [](const std::string&) {});
    work.emplace(io.get_executor());
    thread = std::thread([this] { io.run(); });
  }
  ~running_control() {
    work.reset();
    asio::post(io, [this] { socket.reset(); });
    thread.join();
  }
};

std::string raw_exchange(const std::string& path, const std::string& bytes) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string in;
  char buf[4096];
  ssize_t n;
  while (in.find('\n') == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0) in.append(buf, n);
  ::close(fd);
  return in;
}

}  // namespace

TEST_CASE("a client asks the control socket for status and stacks") {
  temp_dir dir;
  running_control server(dir.path.string());
  CHECK(server.socket->path() == dir.path.string() + "/" + std::to_string(::getpid()) + ".sock");
  struct stat st {};
  REQUIRE(::stat(server.socket->path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  auto agents = find_agents_in(dir.path.string());
  REQUIRE(agents.size() == 1);
  CHECK(agents[0].pid == ::getpid());
  auto status = ask_agent(agents[0].path, {{"op", "status"}}, std::chrono::seconds(5));
  CHECK(status["run_id"] == "r1");
  auto stacks = ask_agent(agents[0].path, {{"op", "stacks"}}, std::chrono::seconds(5));
  CHECK(stacks["summary"] == "line1\nline2");
  CHECK(stacks["files"][0] == "/tmp/a");
  auto failed = ask_agent(agents[0].path, {{"op", "throw"}}, std::chrono::seconds(5));
  CHECK(failed["ok"] == false);
  CHECK(failed["error"] == "handler failed");
}

TEST_CASE("the control socket answers bad and oversized requests with an error") {
  temp_dir dir;
  running_control server(dir.path.string());
  auto path = server.socket->path();
  CHECK(raw_exchange(path, "not json\n").find("\"ok\":false") != std::string::npos);
  CHECK(raw_exchange(path, "{\"op\": 5}\n").find("no string") != std::string::npos);
  auto big = raw_exchange(path, std::string(control_socket::max_request_bytes + 10, 'x'));
  CHECK(big.find("longer than") != std::string::npos);
}

namespace {

int connect_raw(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST_CASE("connections over the limit are closed at once, and the others still served") {
  // Each one holds one of the agent's file descriptors: with no limit a
  // client of ours could take them all (the workers' pipes need them).
  temp_dir dir;
  running_control server(dir.path.string());
  auto path = server.socket->path();
  std::vector<int> held;
  for (std::size_t i = 0; i < control_socket::max_connections; ++i) {
    int fd = connect_raw(path);
    REQUIRE(fd >= 0);
    held.push_back(fd);
  }
  // Accepted in order, so this is the first one over the limit: closed
  // unread, its request gets no reply (EOF or a reset).
  const std::string request = "{\"op\": \"status\"}\n";
  int over = connect_raw(path);
  REQUIRE(over >= 0);
  ::send(over, request.data(), request.size(), MSG_NOSIGNAL);
  char c = 0;
  CHECK(::recv(over, &c, 1, 0) <= 0);
  ::close(over);
  REQUIRE(::send(held[0], request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  ssize_t n;
  while (reply.find('\n') == std::string::npos && (n = ::recv(held[0], buf, sizeof buf, 0)) > 0) {
    reply.append(buf, static_cast<std::size_t>(n));
  }
  CHECK(reply.find("\"run_id\":\"r1\"") != std::string::npos);
  for (int fd : held) ::close(fd);
}

TEST_CASE("control socket: a failed accept (out of file descriptors) is retried later") {
  // The refused connection stays queued: an accept again at once fails
  // again at once, a busy loop that keeps the event loop spinning.
  temp_dir dir;
  asio::io_context io;
  int failures = 0;
  control_socket socket(
      io, dir.path.string(), [](const nlohmann::json&, control_socket::respond_fn) {},
      [&](const std::string& line) {
        if (line.find("accept failed") != std::string::npos) ++failures;
      });
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  int open_now = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++open_now;
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_now + 8);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  // Our clients take every descriptor left, so none is left to accept them.
  std::vector<int> clients;
  for (int fd; (fd = connect_raw(socket.path())) >= 0;) clients.push_back(fd);
  for (int i = 0; i < 200; ++i) io.poll_one();
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old) == 0);
  for (int fd : clients) ::close(fd);
  CHECK(!clients.empty());
  CHECK(failures >= 1);
  CHECK(failures < 10);  // a busy loop fails about every other poll_one()
}

TEST_CASE("the socket file goes with the server, and a stale one is replaced") {
  temp_dir dir;
  std::string path;
  {
    running_control server(dir.path.string());
    path = server.socket->path();
  }
  CHECK(!fs::exists(path));
  // A dead agent's socket: bound, never listened on, closed.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);
  REQUIRE(fs::exists(path));
  {
    running_control server(dir.path.string());
    CHECK(ask_agent(path, {{"op", "status"}}, std::chrono::seconds(5))["run_id"] == "r1");
  }
}

TEST_CASE("finding agents drops stale sockets and ignores other files") {
  temp_dir dir;
  auto stale = (dir.path / "12345.sock").string();
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, stale.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);
  std::ofstream((dir.path / "99.sock").string()) << "not a socket";
  std::ofstream((dir.path / "notes.txt").string()) << "x";
  CHECK(find_agents_in(dir.path.string()).empty());
  CHECK(!fs::exists(stale));
  CHECK(fs::exists(dir.path / "99.sock"));
}

TEST_CASE("asking a socket nobody serves fails with one line naming it") {
  temp_dir dir;
  CHECK_THROWS_WITH(ask_agent((dir.path / "1.sock").string(), {{"op", "status"}},
                              std::chrono::seconds(1)),
                    Catch::Contains("1.sock: cannot connect"));
}

TEST_CASE("the control directory is made 0700 and refused when others can write it") {
  temp_dir tmp;
  auto found = find_control_dir(std::nullopt, true, ::getuid(), tmp.path.string());
  REQUIRE(found.path);
  CHECK(*found.path == tmp.path.string() + "/dtrun-" + std::to_string(::getuid()));
  struct stat st {};
  REQUIRE(::stat(found.path->c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  ::chmod(found.path->c_str(), 0777);
  auto refused = find_control_dir(std::nullopt, true, ::getuid(), tmp.path.string());
  CHECK(!refused.path);
  CHECK(refused.why.find("writable by group or others") != std::string::npos);
  auto other = find_control_dir(std::nullopt, false, ::getuid() + 1, tmp.path.string());
  CHECK(!other.path);
}

TEST_CASE("XDG_RUNTIME_DIR is used when it is ours") {
  temp_dir xdg, tmp;
  ::chmod(xdg.path.c_str(), 0700);
  auto found = find_control_dir(xdg.path.string(), true, ::getuid(), tmp.path.string());
  REQUIRE(found.path);
  CHECK(*found.path == xdg.path.string() + "/dtrun");
  // Not ours (another uid asks): falls back to the tmp directory.
  auto fallback = find_control_dir(xdg.path.string(), false, ::getuid() + 1, tmp.path.string());
  CHECK(!fallback.path);
}

TEST_CASE("an unusable control directory is one warning line, without a doubled prefix") {
  // The agent's warn hook writes "warning: " before the line.
  temp_dir dir;
  std::string file = (dir.path / "a-file").string();
  std::ofstream(file) << "x";
  const char* before = std::getenv("DTRUN_CONTROL_DIR");
  std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  ::setenv("DTRUN_CONTROL_DIR", file.c_str(), 1);
  asio::io_context io;
  std::vector<std::string> warnings;
  auto socket = control_socket::open(
      io, [](const nlohmann::json&, control_socket::respond_fn) {},
      [&](const std::string& line) { warnings.push_back(line); }, [](const std::string&) {});
  if (saved) {
    ::setenv("DTRUN_CONTROL_DIR", saved->c_str(), 1);
  } else {
    ::unsetenv("DTRUN_CONTROL_DIR");
  }
  CHECK(socket == nullptr);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "`dtrun status` cannot reach this agent: " + file + " is not a directory");
}
