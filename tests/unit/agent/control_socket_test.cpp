#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/control_client.h"
#include "agent/control_dir.h"
#include "agent/control_socket.h"

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
