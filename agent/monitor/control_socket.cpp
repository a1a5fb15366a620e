#include "agent/monitor/control_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <stdexcept>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "agent/monitor/control_dir.h"
#include "rendezvous/base/accept_loop.h"

namespace dtrun::agent {

namespace asio = boost::asio;
using unix_socket = asio::local::stream_protocol;

namespace {

constexpr auto idle_timeout = std::chrono::seconds(30);
// The pause after a failed accept (rendezvous/base/accept_loop.h says why).
constexpr auto accept_retry_delay = std::chrono::milliseconds(100);

class connection;

}  // namespace

struct control_socket::state {
  handler_fn handler;
  log_fn debug;
  accept_loop<unix_socket> accepting;
  std::list<std::weak_ptr<connection>> connections;
  bool stopped = false;

  state(asio::io_context& io, handler_fn h, log_fn d)
      : handler(std::move(h)), debug(std::move(d)), accepting(io, accept_retry_delay) {}
};

namespace {

using state_ptr = std::shared_ptr<control_socket::state>;

std::string one_line(const nlohmann::ordered_json& reply) {
  // dump() escapes newlines inside strings, so the reply is one line;
  // invalid UTF-8 (a worker's output in a stack) is replaced, not thrown.
  return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(unix_socket::socket socket, state_ptr st)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(control_socket::max_request_bytes),
        state_(std::move(st)) {}

  void start(std::list<std::weak_ptr<connection>>::iterator entry) {
    entry_ = entry;
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
        peer.uid != ::getuid()) {
      // The directory is 0700, so this takes root or a changed mode; say
      // it at debug level only, an attacker should not fill our log.
      state_->debug(fmt::format("control socket: refused a client of uid {}", peer.uid));
      return close();
    }
    read();
  }

  void close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  ~connection() {
    if (!state_->stopped) state_->connections.erase(entry_);
  }

 private:
  void read() {
    timer_.expires_after(idle_timeout);
    timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->close();
    });
    asio::async_read_until(socket_, buffer_, '\n',
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                             self->on_line(ec, n);
                           });
  }

  void on_line(boost::system::error_code ec, std::size_t n) {
    timer_.cancel();
    if (state_->stopped) return;
    if (ec == asio::error::not_found) {
      // 64 KiB without a newline: not a request of ours.
      return send({{"ok", false},
                   {"error", fmt::format("request longer than {} bytes",
                                         control_socket::max_request_bytes)}},
                  false);
    }
    if (ec) return close();  // EOF, reset, timeout
    std::string line(asio::buffers_begin(buffer_.data()),
                     asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(n));
    buffer_.consume(n);
    auto request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded() || !request.is_object()) {
      return send({{"ok", false}, {"error", "a request is one JSON object on one line"}}, true);
    }
    auto op = request.find("op");
    if (op == request.end() || !op->is_string()) {
      return send({{"ok", false}, {"error", "the request has no string \"op\""}}, true);
    }
    auto answered = std::make_shared<bool>(false);
    // Holds the connection until the handler answers (or drops respond
    // without answering, which closes it).
    control_socket::respond_fn respond = [self = shared_from_this(), answered](
                                             nlohmann::ordered_json reply) {
      if (*answered) return;
      *answered = true;
      if (!self->state_->stopped) self->send(reply, true);
    };
    try {
      state_->handler(request, respond);
    } catch (const std::exception& e) {
      respond({{"ok", false}, {"error", e.what()}});
    } catch (...) {
      respond({{"ok", false}, {"error", "internal error"}});
    }
  }

  void send(const nlohmann::ordered_json& reply, bool then_read) {
    auto text = std::make_shared<std::string>(one_line(reply));
    asio::async_write(socket_, asio::buffer(*text),
                      [self = shared_from_this(), text, then_read](boost::system::error_code ec,
                                                                   std::size_t) {
                        if (self->state_->stopped) return;
                        if (ec || !then_read) return self->close();
                        self->read();
                      });
  }

  unix_socket::socket socket_;
  asio::steady_timer timer_;
  asio::streambuf buffer_;
  state_ptr state_;
  std::list<std::weak_ptr<connection>>::iterator entry_;
};

// The accept loop's callbacks run only while the loop, a member of the
// state, lives and is not stopped.
void start_accepting(const state_ptr& server) {
  server->accepting.start(
      [weak = std::weak_ptr<control_socket::state>(server)](unix_socket::socket socket) {
        auto st = weak.lock();
        if (!st) return;
        if (st->connections.size() >= control_socket::max_connections) {
          boost::system::error_code ignored;
          socket.close(ignored);  // over the limit: closed at once
          return;
        }
        auto c = std::make_shared<connection>(std::move(socket), st);
        st->connections.push_front(c);
        c->start(st->connections.begin());
      },
      [st = server.get()](const boost::system::error_code& ec) {
        st->debug(fmt::format("control socket: accept failed: {}", ec.message()));
      });
}

// True when something accepts connections at `path` (a live agent).
bool someone_listens(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  bool listening = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return listening;
}

}  // namespace

control_socket::control_socket(asio::io_context& io, const std::string& dir, handler_fn handler,
                               log_fn debug)
    : path_(fmt::format("{}/{}.sock", dir, ::getpid())),
      state_(std::make_shared<state>(io, std::move(handler), std::move(debug))) {
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(fmt::format("control socket {}: {}", path_, why));
  };
  if (path_.size() >= sizeof(sockaddr_un{}.sun_path)) fail("the path is too long for a socket");
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) fail("exists and is not a socket");
    if (someone_listens(path_)) fail("another live process listens there");
    ::unlink(path_.c_str());  // a dead agent's (this pid was reused)
  }
  boost::system::error_code ec;
  auto& acceptor = state_->accepting.acceptor();
  unix_socket::endpoint endpoint(path_);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    // The directory is 0700 already; 0600 on the socket as well, in case
    // its mode was loosened.
    mode_t old = ::umask(0177);
    acceptor.bind(endpoint, ec);
    ::umask(old);
  }
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail(ec.message());
  if (::lstat(path_.c_str(), &st) == 0) {
    device_ = st.st_dev;
    inode_ = st.st_ino;
  }
  start_accepting(state_);
}

control_socket::~control_socket() {
  state_->stopped = true;
  state_->accepting.stop();
  for (auto& weak : state_->connections) {
    if (auto c = weak.lock()) c->close();
  }
  state_->connections.clear();
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_) {
    ::unlink(path_.c_str());
  }
}

std::unique_ptr<control_socket> control_socket::open(asio::io_context& io, handler_fn handler,
                                                     log_fn warn, log_fn debug) {
  auto dir = find_control_dir(/*create=*/true);
  if (!dir.path) {
    // `warn` says "warning: " itself.
    warn(fmt::format("`dtrun status` cannot reach this agent: {}", dir.why));
    return nullptr;
  }
  try {
    return std::make_unique<control_socket>(io, *dir.path, std::move(handler), std::move(debug));
  } catch (const std::exception& e) {
    warn(fmt::format("`dtrun status` cannot reach this agent: {}", e.what()));
    return nullptr;
  }
}

}  // namespace dtrun::agent
