#include "agent/monitor/metrics_server.h"

#include <chrono>
#include <list>
#include <optional>
#include <stdexcept>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "rendezvous/base/accept_loop.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
class session;
}

struct metrics_server::state {
  metrics_server_options options;
  text_fn metrics_text;
  text_fn status_json;
  log_fn log;
  // After a failed accept: say so, and try again a second later.
  accept_loop<tcp> accepting;
  // Open sessions, so the destructor can close them; each removes itself.
  std::list<std::weak_ptr<session>> sessions;
  bool stopped = false;

  state(asio::io_context& io, metrics_server_options o, text_fn m, text_fn s, log_fn l)
      : options(std::move(o)),
        metrics_text(std::move(m)),
        status_json(std::move(s)),
        log(std::move(l)),
        accepting(io, std::chrono::seconds(1)) {}
};

namespace {

using metrics_state_ptr = std::shared_ptr<metrics_server::state>;

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, metrics_state_ptr st) : stream_(std::move(socket)), state_(std::move(st)) {}

  void start(std::list<std::weak_ptr<session>>::iterator self_entry) {
    entry_ = self_entry;
    read();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  ~session() {
    if (auto st = state_; st && !st->stopped) st->sessions.erase(entry_);
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(state_->options.max_header_bytes));
    parser_->body_limit(0);  // GET only: any body is refused
    stream_.expires_after(state_->options.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (state_->stopped) return;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      return close();
    }
    if (ec) {
      // A malformed, oversized or body-carrying request: answer once and
      // close, so the client is told rather than cut off.
      http::status code = http::status::bad_request;
      if (ec == http::error::header_limit) code = http::status::request_header_fields_too_large;
      if (ec == http::error::body_limit) code = http::status::payload_too_large;
      return reply(code, "text/plain; charset=utf-8", std::string(http::obsolete_reason(code)) + "\n",
                   false, 11);
    }
    const auto& request = parser_->get();
    bool keep_alive = request.keep_alive();
    unsigned version = request.version();
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return reply(http::status::method_not_allowed, "text/plain; charset=utf-8",
                   "only GET is served\n", keep_alive, version, true);
    }
    std::string_view target(request.target().data(), request.target().size());
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const metrics_server::text_fn* source = nullptr;
    std::string type;
    if (target == "/metrics") {
      source = &state_->metrics_text;
      type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (target == "/status") {
      source = &state_->status_json;
      type = "application/json";
    } else {
      return reply(http::status::not_found, "text/plain; charset=utf-8",
                   "not found; try /metrics or /status\n", keep_alive, version);
    }
    std::string body;
    try {
      body = (*source)();
    } catch (const std::exception& e) {
      return reply(http::status::internal_server_error, "text/plain; charset=utf-8",
                   fmt::format("{}\n", printable(e.what())), keep_alive, version);
    } catch (...) {
      return reply(http::status::internal_server_error, "text/plain; charset=utf-8", "error\n",
                   keep_alive, version);
    }
    head_only_ = request.method() == http::verb::head;
    reply(http::status::ok, type, std::move(body), keep_alive, version);
  }

  void reply(http::status code, std::string_view type, std::string body, bool keep_alive,
             unsigned version, bool allow_get = false) {
    auto response = std::make_shared<http::response<http::string_body>>(code, version);
    response->set(http::field::server, "dtrun");
    response->set(http::field::content_type, beast::string_view(type.data(), type.size()));
    if (allow_get) response->set(http::field::allow, "GET, HEAD");
    response->keep_alive(keep_alive);
    response->body() = std::move(body);
    response->prepare_payload();
    if (head_only_) response->body().clear();  // Content-Length stays the GET's
    head_only_ = false;
    stream_.expires_after(state_->options.read_timeout);  // a reader that never reads
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response, keep_alive](beast::error_code ec,
                                                                        std::size_t) {
                        if (self->state_->stopped) return;
                        if (ec || !keep_alive) return self->close();
                        self->read();
                      });
  }

  beast::tcp_stream stream_;
  metrics_state_ptr state_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::empty_body>> parser_;
  std::list<std::weak_ptr<session>>::iterator entry_;
  bool head_only_ = false;
};

// The accept loop's callbacks run only while the loop, a member of the
// state, lives and is not stopped.
void start_accepting(const metrics_state_ptr& server) {
  server->accepting.start(
      [weak = std::weak_ptr<metrics_server::state>(server)](tcp::socket socket) {
        auto st = weak.lock();
        if (!st) return;
        if (st->sessions.size() >= st->options.max_connections) {
          boost::system::error_code ignored;
          socket.close(ignored);  // over the limit: closed at once
          return;
        }
        auto s = std::make_shared<session>(std::move(socket), st);
        st->sessions.push_front(s);
        s->start(st->sessions.begin());
      },
      // EMFILE and friends: say so (the loop tries again later).
      [st = server.get()](const boost::system::error_code& ec) {
        st->log(fmt::format("metrics: accept failed: {}", ec.message()));
      });
}

}  // namespace

metrics_server::metrics_server(asio::io_context& io, metrics_server_options options,
                               text_fn metrics_text, text_fn status_json, log_fn log)
    : state_(std::make_shared<state>(io, std::move(options), std::move(metrics_text),
                                     std::move(status_json), std::move(log))) {
  const auto& o = state_->options;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(fmt::format("--metrics-port {}: {}", o.port, why));
  };
  boost::system::error_code ec;
  auto address = asio::ip::make_address(o.host, ec);
  if (ec) fail(fmt::format("'{}' is not an IP address; use e.g. 127.0.0.1 or 0.0.0.0", printable(o.host)));
  tcp::endpoint endpoint(address, o.port);
  auto& acceptor = state_->accepting.acceptor();
  if (acceptor.open(endpoint.protocol(), ec); ec) fail("cannot open a socket: " + ec.message());
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    if (ec == asio::error::address_in_use) fail("address in use; pick a free port or 0");
    if (ec == asio::error::access_denied) fail("permission denied; pick a port above 1023 or 0");
    fail(fmt::format("cannot bind {}: {}", printable(o.host), ec.message()));
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    fail("cannot listen: " + ec.message());
  }
  port_ = acceptor.local_endpoint().port();
  start_accepting(state_);
}

metrics_server::metrics_server(asio::io_context& io, const std::string& host, std::uint16_t port,
                               text_fn metrics_text, text_fn status_json, log_fn log)
    : metrics_server(io, metrics_server_options{.host = host, .port = port},
                     std::move(metrics_text), std::move(status_json), std::move(log)) {}

metrics_server::~metrics_server() {
  state_->stopped = true;
  state_->accepting.stop();
  for (auto& weak : state_->sessions) {
    if (auto s = weak.lock()) s->close();
  }
  state_->sessions.clear();
}

std::size_t metrics_server::open_connections() const { return state_->sessions.size(); }

}  // namespace dtrun::agent
