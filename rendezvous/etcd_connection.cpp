#include "rendezvous/etcd_connection.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <optional>
#include <stdexcept>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>

namespace dtrun::rendezvous {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

// A unary reply is small (a range of one key, a txn); anything beyond this
// is not etcd's gateway talking.
constexpr std::uint64_t max_reply_bytes = 64ull << 20;
// A watch line carries events of a few keys; bound what we hold unsplit.
constexpr std::size_t max_line_bytes = 16u << 20;

// What an etcd error reply says, as one line.
std::string describe_error(int status, const json& body) {
  std::string message;
  if (body.is_object()) {
    if (auto m = body.find("message"); m != body.end() && m->is_string()) {
      message = m->get<std::string>();
    } else if (auto e = body.find("error"); e != body.end() && e->is_string()) {
      message = e->get<std::string>();
    }
  }
  if (message.empty()) message = "no error message";
  return fmt::format("HTTP {}: {}", status, message);
}

// 503, or gRPC's UNAVAILABLE (14) / DEADLINE_EXCEEDED (4): no leader or no
// quorum right now; another try (elsewhere, later) may succeed.
bool is_retryable(int status, const json& body) {
  if (status == 503 || status == 502 || status == 504) return true;
  if (body.is_object()) {
    auto code = body.find("code");
    if (code != body.end() && code->is_number_integer()) {
      auto c = code->get<int>();
      return c == 14 || c == 4;
    }
  }
  return false;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  if (bytes.empty()) return out;
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

std::int64_t integer_of(const nlohmann::json& j) {
  try {
    if (j.is_string()) return std::stoll(j.get<std::string>());
    if (j.is_number_integer()) return j.get<std::int64_t>();
  } catch (const std::exception&) {
  }
  return 0;
}

std::shared_ptr<ssl::context> make_etcd_tls(const etcd_options& o) {
  if (!o.tls) return nullptr;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  if (o.cacert.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(o.cacert, ec);
  }
  if (ec) {
    throw std::runtime_error(fmt::format("cannot use the etcd CA file '{}' (--rdzv-conf cacert): {}",
                                         o.cacert, ec.message()));
  }
  if (o.cert.empty() != o.key.empty()) {
    throw std::runtime_error(
        "--rdzv-conf cert and key go together: give both (a client certificate) or neither");
  }
  if (!o.cert.empty()) {
    ctx->use_certificate_chain_file(o.cert, ec);
    if (ec) {
      throw std::runtime_error(fmt::format(
          "cannot use the etcd client certificate '{}' (--rdzv-conf cert): {}", o.cert,
          ec.message()));
    }
    ctx->use_private_key_file(o.key, ssl::context::pem, ec);
    if (ec) {
      throw std::runtime_error(fmt::format(
          "cannot use the etcd client key '{}' (--rdzv-conf key): {}", o.key, ec.message()));
    }
  }
  ctx->set_verify_mode(ssl::verify_peer);
  return ctx;
}

class etcd_connection::impl : public std::enable_shared_from_this<etcd_connection::impl> {
 public:
  // One connection attempt's stream, buffer and parser. Handlers hold it,
  // so a stream replaced or dropped while an operation is pending stays
  // alive until that operation's handler has run.
  struct wire {
    std::unique_ptr<beast::tcp_stream> tcp;
    std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
    beast::flat_buffer buffer;
    std::unique_ptr<http::response_parser<http::string_body>> parser;
    std::string line;
    std::function<std::size_t(std::uint64_t, boost::string_view, boost::system::error_code&)>
        on_chunk;

    beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *tcp; }
    template <class F>
    void with_stream(F&& f) {
      if (tls) {
        f(*tls);
      } else {
        f(*tcp);
      }
    }
  };

  impl(asio::io_context& io, const etcd_options& options, std::shared_ptr<ssl::context> tls)
      : io_(io), options_(options), tls_context_(std::move(tls)), resolver_(io) {}

  // --- connecting -------------------------------------------------------

  void ensure_connected(std::chrono::milliseconds timeout, std::function<void(std::string)> then) {
    if (connected_ && wire_) return then({});
    tries_left_ = options_.members.size();
    last_error_.clear();
    try_member(timeout, std::move(then));
  }

  void try_member(std::chrono::milliseconds timeout, std::function<void(std::string)> then) {
    if (closed_) return then("the etcd client was closed");
    if (tries_left_ == 0) {
      return then(fmt::format("no etcd member answers ({}): {}; check --rdzv-endpoint and that "
                              "the etcd cluster is running",
                              members_text(options_.members), last_error_));
    }
    --tries_left_;
    auto w = new_wire();
    const auto& m = options_.members[member_];
    auto self = shared_from_this();
    w->lowest().expires_after(timeout);
    resolver_.async_resolve(
        m.host, std::to_string(m.port),
        [self, w, timeout, then = std::move(then)](const boost::system::error_code& ec,
                                                  tcp::resolver::results_type results) mutable {
          if (w != self->wire_) return then("the etcd connection was reset");
          if (ec) return self->member_failed(ec.message(), timeout, std::move(then));
          w->lowest().async_connect(
              results, [self, w, timeout, then = std::move(then)](
                           const boost::system::error_code& ec2, const tcp::endpoint&) mutable {
                if (w != self->wire_) return then("the etcd connection was reset");
                if (ec2) return self->member_failed(ec2.message(), timeout, std::move(then));
                if (!w->tls) return self->connected(std::move(then));
                self->start_tls(w, timeout, std::move(then));
              });
        });
  }

  void start_tls(const std::shared_ptr<wire>& w, std::chrono::milliseconds timeout,
                 std::function<void(std::string)> then) {
    const auto& host = options_.members[member_].host;
    // SNI and the name the certificate must carry.
    SSL_set_tlsext_host_name(w->tls->native_handle(), host.c_str());
    w->tls->set_verify_callback(ssl::host_name_verification(host));
    auto self = shared_from_this();
    w->tls->async_handshake(ssl::stream_base::client,
                            [self, w, timeout, then = std::move(then)](
                                const boost::system::error_code& ec) mutable {
                              if (w != self->wire_) return then("the etcd connection was reset");
                              if (ec) {
                                return self->member_failed(
                                    fmt::format("TLS handshake: {}", ec.message()), timeout,
                                    std::move(then));
                              }
                              self->connected(std::move(then));
                            });
  }

  void connected(std::function<void(std::string)> then) {
    connected_ = true;
    then({});
  }

  void member_failed(const std::string& why, std::chrono::milliseconds timeout,
                     std::function<void(std::string)> then) {
    last_error_ = fmt::format("{}: {}", to_string(options_.members[member_]), why);
    member_ = (member_ + 1) % options_.members.size();
    try_member(timeout, std::move(then));
  }

  std::shared_ptr<wire> new_wire() {
    drop();
    auto w = std::make_shared<wire>();
    if (tls_context_) {
      w->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(io_, *tls_context_);
    } else {
      w->tcp = std::make_unique<beast::tcp_stream>(io_);
    }
    wire_ = w;
    return w;
  }

  // --- requests ---------------------------------------------------------

  http::request<http::string_body> request(const std::string& path, std::string body) {
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, to_string(options_.members[member_]));
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

  static etcd_reply reset_reply() {
    return {.error = "the etcd connection was reset", .sent = true, .retryable = true};
  }

  void post(std::string path, std::string body, std::chrono::milliseconds timeout,
            etcd_reply_callback done) {
    auto self = shared_from_this();
    ensure_connected(timeout, [self, path = std::move(path), body = std::move(body), timeout,
                               done = std::move(done)](std::string error) mutable {
      if (!error.empty()) return done({.error = error, .sent = false, .retryable = true});
      auto w = self->wire_;
      auto req = std::make_shared<http::request<http::string_body>>(
          self->request(path, std::move(body)));
      w->lowest().expires_after(timeout);
      w->with_stream([&](auto& s) {
        http::async_write(s, *req, [self, w, req, done = std::move(done)](
                                       const boost::system::error_code& ec, std::size_t) mutable {
          if (w != self->wire_) return done(reset_reply());
          if (ec) return self->broken(ec.message(), std::move(done));
          self->read_reply(w, std::move(done));
        });
      });
    });
  }

  void read_reply(const std::shared_ptr<wire>& w, etcd_reply_callback done) {
    w->parser = std::make_unique<http::response_parser<http::string_body>>();
    w->parser->body_limit(max_reply_bytes);
    auto self = shared_from_this();
    w->with_stream([&](auto& s) {
      http::async_read(s, w->buffer, *w->parser, [self, w, done = std::move(done)](
                                                     const boost::system::error_code& ec,
                                                     std::size_t) mutable {
        if (w != self->wire_) return done(reset_reply());
        if (ec) return self->broken(ec.message(), std::move(done));
        auto& res = w->parser->get();
        etcd_reply r;
        r.sent = true;
        r.status = static_cast<int>(res.result_int());
        r.body = json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
        if (!res.keep_alive()) self->drop();
        if (r.body.is_discarded()) {
          r.error = fmt::format("HTTP {} from {} is not JSON; is this an etcd member?", r.status,
                                self->member_text());
          r.retryable = r.status >= 500;
        } else if (r.status != 200) {
          r.error = fmt::format("{} ({})", describe_error(r.status, r.body), self->member_text());
          r.retryable = is_retryable(r.status, r.body);
        }
        done(std::move(r));
      });
    });
  }

  // The connection failed in the middle of a request: it may have been
  // applied. The next call connects afresh (to the same member first).
  void broken(const std::string& why, etcd_reply_callback done) {
    auto what = fmt::format("the connection to etcd member {} failed: {}", member_text(), why);
    drop();
    done({.error = what, .sent = true, .retryable = true});
  }

  void drop() {
    connected_ = false;
    if (!wire_) return;
    auto w = std::exchange(wire_, nullptr);
    boost::system::error_code ignored;
    w->lowest().socket().close(ignored);
  }

  // --- streams ----------------------------------------------------------

  void stream(std::string path, std::string body, std::chrono::milliseconds timeout,
              std::function<void(std::string_view)> on_line, etcd_reply_callback done) {
    auto self = shared_from_this();
    ensure_connected(timeout, [self, path = std::move(path), body = std::move(body), timeout,
                               on_line = std::move(on_line),
                               done = std::move(done)](std::string error) mutable {
      if (!error.empty()) return done({.error = error, .sent = false, .retryable = true});
      auto w = self->wire_;
      auto req = std::make_shared<http::request<http::string_body>>(
          self->request(path, std::move(body)));
      w->lowest().expires_after(timeout);
      w->with_stream([&](auto& s) {
        http::async_write(s, *req, [self, w, req, on_line = std::move(on_line),
                                    done = std::move(done)](const boost::system::error_code& ec,
                                                            std::size_t) mutable {
          if (w != self->wire_) return done(reset_reply());
          if (ec) return self->broken(ec.message(), std::move(done));
          w->parser = std::make_unique<http::response_parser<http::string_body>>();
          w->parser->body_limit(boost::none);
          // The parser belongs to the wire: a raw pointer, so that the
          // callback it holds does not keep its owner alive.
          auto* raw = w.get();
          // Beast keeps a reference to the callback: the wire owns it.
          w->on_chunk = [raw, on_line](std::uint64_t, boost::string_view data,
                                       boost::system::error_code& cec) -> std::size_t {
            raw->line.append(data.data(), data.size());
            std::size_t start = 0;
            for (auto nl = raw->line.find('\n'); nl != std::string::npos;
                 nl = raw->line.find('\n', start)) {
              on_line(std::string_view(raw->line).substr(start, nl - start));
              start = nl + 1;
            }
            raw->line.erase(0, start);
            if (raw->line.size() > max_line_bytes) cec = http::error::body_limit;
            return data.size();
          };
          w->parser->on_chunk_body(w->on_chunk);
          self->read_header(w, std::move(done));
        });
      });
    });
  }

  void read_header(const std::shared_ptr<wire>& w, etcd_reply_callback done) {
    auto self = shared_from_this();
    w->with_stream([&](auto& s) {
      http::async_read_header(s, w->buffer, *w->parser, [self, w, done = std::move(done)](
                                                            const boost::system::error_code& ec,
                                                            std::size_t) mutable {
        if (w != self->wire_) return done(reset_reply());
        if (ec) return self->broken(ec.message(), std::move(done));
        auto status = static_cast<int>(w->parser->get().result_int());
        if (status != 200) {
          self->drop();
          return done({.error = fmt::format("HTTP {} for a watch ({})", status, self->member_text()),
                       .sent = true,
                       .retryable = status >= 500,
                       .status = status});
        }
        // A watch lasts as long as the job: no time limit from here on.
        w->lowest().expires_never();
        self->read_stream(w, std::move(done));
      });
    });
  }

  void read_stream(const std::shared_ptr<wire>& w, etcd_reply_callback done) {
    auto self = shared_from_this();
    w->with_stream([&](auto& s) {
      http::async_read_some(s, w->buffer, *w->parser, [self, w, done = std::move(done)](
                                                          const boost::system::error_code& ec,
                                                          std::size_t) mutable {
        if (w != self->wire_) return done(reset_reply());
        if (ec) return self->broken(ec.message(), std::move(done));
        if (w->parser->is_done()) {
          self->drop();
          return done({.error = fmt::format("etcd member {} ended the watch", self->member_text()),
                       .sent = true,
                       .retryable = true});
        }
        self->read_stream(w, std::move(done));
      });
    });
  }

  void close() {
    closed_ = true;
    resolver_.cancel();
    drop();
  }

  std::string member_text() const { return to_string(options_.members[member_]); }

  std::string local_address() const {
    if (!connected_ || !wire_) return {};
    boost::system::error_code ec;
    auto ep = wire_->lowest().socket().local_endpoint(ec);
    return ec ? std::string() : ep.address().to_string();
  }

  asio::io_context& io_;
  etcd_options options_;
  std::shared_ptr<ssl::context> tls_context_;
  tcp::resolver resolver_;
  std::shared_ptr<wire> wire_;
  std::size_t member_ = 0;
  std::size_t tries_left_ = 0;
  std::string last_error_;
  bool connected_ = false, closed_ = false;
};

std::shared_ptr<etcd_connection> etcd_connection::create(asio::io_context& io,
                                                         const etcd_options& options,
                                                         std::shared_ptr<ssl::context> tls) {
  return std::shared_ptr<etcd_connection>(
      new etcd_connection(std::make_shared<impl>(io, options, std::move(tls))));
}

etcd_connection::etcd_connection(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
etcd_connection::~etcd_connection() { impl_->close(); }

void etcd_connection::post(std::string path, std::string body, std::chrono::milliseconds timeout,
                           etcd_reply_callback done) {
  impl_->post(std::move(path), std::move(body), timeout, std::move(done));
}

void etcd_connection::stream(std::string path, std::string body, std::chrono::milliseconds timeout,
                             std::function<void(std::string_view)> on_line,
                             etcd_reply_callback done) {
  impl_->stream(std::move(path), std::move(body), timeout, std::move(on_line), std::move(done));
}

void etcd_connection::next_member() {
  impl_->drop();
  impl_->member_ = (impl_->member_ + 1) % impl_->options_.members.size();
}

void etcd_connection::close() { impl_->close(); }
std::string etcd_connection::member_text() const { return impl_->member_text(); }
std::string etcd_connection::local_address() const { return impl_->local_address(); }

}  // namespace dtrun::rendezvous
