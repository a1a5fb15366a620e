#include "agent/monitor/control_client.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "agent/monitor/control_dir.h"
#include "agent/process/fd_closer.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {

namespace {

constexpr std::size_t max_reply_bytes = 16 * 1024 * 1024;

// A connected socket, or -1 with errno set.
int connect_to(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

std::vector<agent_endpoint> find_agents_in(const std::string& dir) {
  std::vector<agent_endpoint> found;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return found;
  while (dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".sock") continue;
    auto digits = name.substr(0, name.size() - 5);
    pid_t pid = parse_whole<pid_t>(digits).value_or(0);
    if (pid <= 0) continue;
    std::string path = fmt::format("{}/{}", dir, name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int fd = connect_to(path);
    if (fd < 0) {
      // Refused: nobody listens, the agent is gone. Removing it is safe
      // only for our own file (the directory is ours anyway).
      if (errno == ECONNREFUSED && st.st_uid == ::getuid()) ::unlink(path.c_str());
      continue;
    }
    ::close(fd);
    found.push_back({pid, std::move(path)});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(),
            [](const agent_endpoint& a, const agent_endpoint& b) { return a.pid < b.pid; });
  return found;
}

std::vector<agent_endpoint> find_local_agents() {
  std::vector<agent_endpoint> all;
  for (const auto& dir : control_dirs_to_search()) {
    for (auto& found : find_agents_in(dir)) {
      bool seen = std::any_of(all.begin(), all.end(),
                              [&](const agent_endpoint& a) { return a.pid == found.pid; });
      if (!seen) all.push_back(std::move(found));
    }
  }
  std::sort(all.begin(), all.end(),
            [](const agent_endpoint& a, const agent_endpoint& b) { return a.pid < b.pid; });
  return all;
}

nlohmann::json ask_agent(const std::string& path, const nlohmann::json& request,
                         std::chrono::milliseconds timeout) {
  auto fail = [&](const std::string& why) -> nlohmann::json {
    throw std::runtime_error(fmt::format("{}: {}", path, why));
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int fd = connect_to(path);
  if (fd < 0) return fail(fmt::format("cannot connect: {}", std::strerror(errno)));
  fd_closer closer{fd};
  auto wait_for = [&](short events) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                      std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
    } while (r < 0 && errno == EINTR);
    return r > 0;
  };
  std::string out = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::size_t sent = 0;
  while (sent < out.size()) {
    if (!wait_for(POLLOUT)) return fail("timed out sending the request");
    ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return fail(fmt::format("cannot send: {}", std::strerror(errno)));
    sent += static_cast<std::size_t>(n);
  }
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    if (in.size() > max_reply_bytes) return fail("the reply is over 16 MiB");
    if (!wait_for(POLLIN)) {
      return fail(fmt::format("no reply within {:.1f} s", static_cast<double>(timeout.count()) / 1000));
    }
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return fail(fmt::format("cannot read: {}", std::strerror(errno)));
    if (n == 0) return fail("the agent closed the connection without a reply");
    in.append(buf, static_cast<std::size_t>(n));
  }
  in.resize(in.find('\n'));
  auto reply = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) return fail("the reply is not a JSON object");
  return reply;
}

}  // namespace dtrun::agent
