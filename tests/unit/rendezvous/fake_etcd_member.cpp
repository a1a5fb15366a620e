#include "tests/unit/rendezvous/fake_etcd_member.h"

#include <chrono>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace dtrun::rendezvous::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class fake_etcd_member::impl : public std::enable_shared_from_this<fake_etcd_member::impl> {
 public:
  impl(asio::io_context& io, answer_fn answer)
      : io_(io), acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        answer_(std::move(answer)) {}

  struct connection {
    explicit connection(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
    tcp::socket socket;
    beast::flat_buffer buffer;
    http::request<http::string_body> request;
    asio::steady_timer timer;
    std::string out;
  };

  void accept() {
    acceptor_.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      self->read(std::make_shared<connection>(std::move(s)));
      self->accept();
    });
  }

  void read(std::shared_ptr<connection> c) {
    c->request = {};
    http::async_read(c->socket, c->buffer, c->request,
                     [self = shared_from_this(), c](boost::system::error_code ec, std::size_t) {
                       if (ec) return;
                       std::string path(c->request.target());
                       self->paths_.push_back(path);
                       auto r = self->answer_(path, c->request.body());
                       c->out = std::move(r.bytes);
                       asio::async_write(c->socket, asio::buffer(c->out),
                                         [self, c, after = r.after](boost::system::error_code e2,
                                                                    std::size_t) {
                                           if (e2) return;
                                           self->after(c, after);
                                         });
                     });
  }

  void after(const std::shared_ptr<connection>& c, then what) {
    switch (what) {
      case then::keep: return read(c);
      case then::hold: return hold(c);
      case then::flood: return flood(c);
      case then::drip: return drip(c);
    }
  }

  // Until the client hangs up: a read that ends then.
  void hold(const std::shared_ptr<connection>& c) {
    c->socket.async_read_some(asio::buffer(hold_sink_),
                              [self = shared_from_this(), c](boost::system::error_code ec,
                                                             std::size_t) {
                                if (!ec) self->hold(c);
                              });
  }

  void flood(const std::shared_ptr<connection>& c) {
    c->out.assign(64 * 1024, 'x');
    asio::async_write(c->socket, asio::buffer(c->out),
                      [self = shared_from_this(), c](boost::system::error_code ec, std::size_t n) {
                        self->streamed_ += n;
                        if (!ec) self->flood(c);
                      });
  }

  void drip(const std::shared_ptr<connection>& c) {
    c->timer.expires_after(std::chrono::milliseconds(50));
    c->timer.async_wait([self = shared_from_this(), c](boost::system::error_code ec) {
      if (ec) return;
      c->out = "x";
      asio::async_write(c->socket, asio::buffer(c->out),
                        [self, c](boost::system::error_code e2, std::size_t n) {
                          self->streamed_ += n;
                          if (!e2) self->drip(c);
                        });
    });
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  answer_fn answer_;
  std::vector<std::string> paths_;
  std::size_t streamed_ = 0;
  char hold_sink_[4096];
};

fake_etcd_member::fake_etcd_member(asio::io_context& io, answer_fn answer)
    : impl_(std::make_shared<impl>(io, std::move(answer))) {
  impl_->accept();
}

fake_etcd_member::~fake_etcd_member() {
  boost::system::error_code ignored;
  impl_->acceptor_.close(ignored);
}

unsigned short fake_etcd_member::port() const { return impl_->acceptor_.local_endpoint().port(); }
std::string fake_etcd_member::endpoint() const { return fmt::format("127.0.0.1:{}", port()); }
const std::vector<std::string>& fake_etcd_member::paths() const { return impl_->paths_; }
std::size_t fake_etcd_member::streamed() const { return impl_->streamed_; }

std::string http_json(const std::string& json) {
  return fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
      json.size(), json);
}

std::string http_chunked_head() {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
}

std::string http_chunk(const std::string& line) {
  return fmt::format("{:x}\r\n{}\n\r\n", line.size() + 1, line);
}

etcd_options options_for(const fake_etcd_member& m, std::chrono::milliseconds timeout) {
  etcd_options o;
  bool tls = false;
  std::string error;
  o.members = *parse_etcd_members(m.endpoint(), tls, error);
  o.request_timeout = timeout;
  o.attempt_timeout = timeout;
  o.lease_ttl = std::chrono::seconds(1);
  o.run_id = "job";
  o.max_reply_bytes = 1 << 20;
  return o;
}

}  // namespace dtrun::rendezvous::testing
