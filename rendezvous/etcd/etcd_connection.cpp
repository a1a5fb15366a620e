#include "rendezvous/etcd/etcd_connection.h"

#include "rendezvous/etcd/etcd_body.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <deque>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
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

class etcd_connection::impl : public std::enable_shared_from_this<etcd_connection::impl> {
 public:
  // One connection attempt's stream, buffer and parser. Handlers hold it,
  // so a stream replaced or dropped while an operation is pending stays
  // alive until that operation's handler has run.
  struct wire {
    std::unique_ptr<beast::tcp_stream> tcp;
    std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
    beast::flat_buffer buffer;
    std::unique_ptr<http::response_parser<capped_body>> parser;

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
      : io_(io), options_(options), tls_context_(std::move(tls)), resolver_(io), deadline_(io) {}

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

  // --- the call's deadline ---------------------------------------------

  // One deadline per call, what is left of it when it goes on the wire
  // (next_call set limit_, the caller's own bound, for the message): it
  // drops the connection, so whatever is pending fails, however many bytes
  // still trickle in.
  void start_deadline(std::chrono::milliseconds left) {
    timed_out_ = false;
    deadline_.expires_after(left);
    deadline_.async_wait([self = shared_from_this(), call = ++call_](
                             const boost::system::error_code& ec) {
      if (ec || call != self->call_) return;
      self->timed_out_ = true;
      self->drop();
    });
  }

  void stop_deadline() {
    ++call_;
    deadline_.cancel();
  }

  // Why a pending operation of this call ended: the deadline, or `why`.
  std::string failure(const std::string& why) const {
    if (!timed_out_) return why;
    return fmt::format("etcd member {} did not answer within {} ms", member_text(),
                       limit_.count());
  }

  etcd_reply reset_reply() const {
    return {.error = failure("the etcd connection was reset"),
            .sent = true,
            .retryable = true,
            .member = member_text()};
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

  // Connects when needed, then writes the request; `then` reads the reply.
  void send(std::string path, std::string body, std::chrono::milliseconds timeout,
            etcd_reply_callback done,
            std::function<void(std::shared_ptr<wire>, etcd_reply_callback)> then) {
    start_deadline(timeout);
    auto self = shared_from_this();
    ensure_connected(timeout, [self, path = std::move(path), body = std::move(body), timeout,
                               done = std::move(done),
                               then = std::move(then)](std::string error) mutable {
      if (!error.empty()) {
        self->stop_deadline();
        return done({.error = self->failure(error),
                     .sent = false,
                     .retryable = true,
                     .member = self->member_text()});
      }
      auto w = self->wire_;
      auto req = std::make_shared<http::request<http::string_body>>(
          self->request(path, std::move(body)));
      w->lowest().expires_after(timeout);
      w->with_stream([&](auto& s) {
        http::async_write(s, *req, [self, w, req, done = std::move(done), then = std::move(then)](
                                       const boost::system::error_code& ec, std::size_t) mutable {
          if (w != self->wire_) return self->end_call(self->reset_reply(), std::move(done));
          if (ec) return self->broken(ec, std::move(done));
          w->parser = std::make_unique<http::response_parser<capped_body>>();
          w->parser->body_limit(boost::none);  // capped_body checks
          w->parser->get().body().cap = self->options_.max_reply_bytes;
          then(w, std::move(done));
        });
      });
    });
  }

  void end_call(etcd_reply r, etcd_reply_callback done) {
    stop_deadline();
    done(std::move(r));
  }

  // --- one call at a time ----------------------------------------------

  // A caller may post while another call is on the wire (a lease check
  // beside the renewal, a revoke at close): HTTP/1.1 without pipelining
  // carries one at a time, so it waits its turn, within its own deadline
  // counted from when it was posted; one whose deadline comes while it
  // waits fails then, unsent.
  using call_start = std::function<void(std::chrono::milliseconds, etcd_reply_callback)>;
  struct waiting_call {
    std::uint64_t id;
    std::chrono::milliseconds timeout;
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<asio::steady_timer> timer;  // its deadline while it waits
    call_start start;
    etcd_reply_callback done;
  };

  void enqueue(std::chrono::milliseconds timeout, call_start start, etcd_reply_callback done) {
    waiting_call call{++last_waiting_id_, timeout, std::chrono::steady_clock::now() + timeout,
                      nullptr, std::move(start), std::move(done)};
    if (busy_) {
      call.timer = std::make_shared<asio::steady_timer>(io_, call.deadline);
      call.timer->async_wait([self = shared_from_this(), id = call.id](
                                 const boost::system::error_code& ec) {
        if (!ec) self->expire(id);
      });
    }
    waiting_.push_back(std::move(call));
    next_call();
  }

  void expire(std::uint64_t id) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [id](const waiting_call& c) { return c.id == id; });
    if (it == waiting_.end()) return;  // it went on the wire meanwhile
    auto done = std::move(it->done);
    auto timeout = it->timeout;
    waiting_.erase(it);
    done(unsent_reply(timeout));
  }

  etcd_reply unsent_reply(std::chrono::milliseconds timeout) const {
    if (closed_) return {.error = "the etcd client was closed", .member = member_text()};
    return {.error = fmt::format("etcd member {} did not answer within {} ms (the call waited "
                                 "for the one before it, and was not sent)",
                                 member_text(), timeout.count()),
            .retryable = true,
            .member = member_text()};
  }

  void next_call() {
    while (!busy_ && !waiting_.empty()) {
      auto call = std::move(waiting_.front());
      waiting_.pop_front();
      if (call.timer) call.timer->cancel();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          call.deadline - std::chrono::steady_clock::now());
      if (closed_ || left <= std::chrono::milliseconds(0)) {
        asio::post(io_, [done = std::move(call.done), r = unsent_reply(call.timeout)] { done(r); });
        continue;
      }
      busy_ = true;
      limit_ = call.timeout;
      // The caller hears first, with the wire still its own: a next_member()
      // or close() of its drops no other caller's call, and a call it posts
      // waits behind those already waiting.
      call.start(left, [self = shared_from_this(), done = std::move(call.done)](etcd_reply r) {
        done(std::move(r));
        self->busy_ = false;
        self->next_call();
      });
    }
  }

  // send(), once the call's turn comes.
  void queue_send(std::string path, std::string body, std::chrono::milliseconds timeout,
                  etcd_reply_callback done,
                  std::function<void(std::shared_ptr<wire>, etcd_reply_callback)> then) {
    enqueue(timeout, [self = shared_from_this(), path = std::move(path), body = std::move(body),
                      then = std::move(then)](std::chrono::milliseconds left,
                                              etcd_reply_callback d) mutable {
      self->send(std::move(path), std::move(body), left, std::move(d), std::move(then));
    }, std::move(done));
  }

  void post(std::string path, std::string body, std::chrono::milliseconds timeout,
            etcd_reply_callback done) {
    queue_send(std::move(path), std::move(body), timeout, std::move(done),
               [self = shared_from_this()](std::shared_ptr<wire> w, etcd_reply_callback d) {
                 self->read_reply(w, std::move(d));
               });
  }

  void read_reply(const std::shared_ptr<wire>& w, etcd_reply_callback done) {
    auto self = shared_from_this();
    w->with_stream([&](auto& s) {
      http::async_read(s, w->buffer, *w->parser, [self, w, done = std::move(done)](
                                                     const boost::system::error_code& ec,
                                                     std::size_t) mutable {
        if (w != self->wire_) return self->end_call(self->reset_reply(), std::move(done));
        if (ec) return self->broken(ec, std::move(done));
        auto& res = w->parser->get();
        etcd_reply r;
        r.sent = true;
        r.member = self->member_text();
        r.status = static_cast<int>(res.result_int());
        r.body = std::move(res.body().text);
        if (!res.keep_alive()) self->drop();
        if (r.status != 200) {
          auto failure = describe_http_failure(r.status, r.body, r.member);
          r.error = std::move(failure.line);
          r.retryable = failure.retryable;
        }
        self->end_call(std::move(r), std::move(done));
      });
    });
  }

  // The connection failed in the middle of a request: it may have been
  // applied. The next call connects afresh (to the same member first).
  void broken(const boost::system::error_code& ec, etcd_reply_callback done) {
    std::string why = ec == http::error::body_limit
                          ? fmt::format("its reply exceeds {} bytes, far more than etcd "
                                        "answers dtrun; is this an etcd member?",
                                        options_.max_reply_bytes)
                          : ec.message();
    auto what = failure(fmt::format("the connection to etcd member {} failed: {}", member_text(), why));
    auto member = member_text();
    drop();
    end_call({.error = what, .sent = true, .retryable = true, .member = member}, std::move(done));
  }

  void drop() {
    connected_ = false;
    if (!wire_) return;
    auto w = std::exchange(wire_, nullptr);
    boost::system::error_code ignored;
    w->lowest().socket().close(ignored);
  }

  // --- streams ----------------------------------------------------------

  // A stream holds the connection until it ends: calls posted meanwhile
  // wait for that (or for next_member() or close() to end it).
  void stream(std::string path, std::string body, std::chrono::milliseconds timeout,
              std::function<void(std::string_view)> on_line, etcd_reply_callback done) {
    queue_send(std::move(path), std::move(body), timeout, std::move(done),
               [self = shared_from_this(), on_line = std::move(on_line)](
                   std::shared_ptr<wire> w, etcd_reply_callback d) {
                 w->parser->get().body().on_line = on_line;
                 self->read_header(w, std::move(d));
               });
  }

  void read_header(const std::shared_ptr<wire>& w, etcd_reply_callback done) {
    auto self = shared_from_this();
    w->with_stream([&](auto& s) {
      http::async_read_header(s, w->buffer, *w->parser, [self, w, done = std::move(done)](
                                                            const boost::system::error_code& ec,
                                                            std::size_t) mutable {
        if (w != self->wire_) return self->end_call(self->reset_reply(), std::move(done));
        if (ec) return self->broken(ec, std::move(done));
        auto status = static_cast<int>(w->parser->get().result_int());
        if (status != 200) {
          auto member = self->member_text();
          self->drop();
          return self->end_call({.error = fmt::format("HTTP {} for a watch ({})", status, member),
                                 .sent = true,
                                 .retryable = status >= 500,
                                 .status = status,
                                 .member = member},
                                std::move(done));
        }
        // A watch lasts as long as the job: no time limit from here on.
        self->stop_deadline();
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
        if (w != self->wire_) return done(self->reset_reply());
        if (ec) return self->broken(ec, std::move(done));
        if (w->parser->is_done()) {
          auto member = self->member_text();
          self->drop();
          return done({.error = fmt::format("etcd member {} ended the watch", member),
                       .sent = true,
                       .retryable = true,
                       .member = member});
        }
        self->read_stream(w, std::move(done));
      });
    });
  }

  // The call on the wire fails as its connection drops; those waiting
  // fail when it has (next_call sees closed_).
  void close() {
    closed_ = true;
    resolver_.cancel();
    stop_deadline();
    drop();
    next_call();
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
  asio::steady_timer deadline_;
  std::uint64_t call_ = 0;
  std::chrono::milliseconds limit_{0};
  bool timed_out_ = false;
  std::shared_ptr<wire> wire_;
  std::size_t member_ = 0;
  std::size_t tries_left_ = 0;
  std::string last_error_;
  bool connected_ = false, closed_ = false;
  bool busy_ = false;  // a call is on the wire: the others wait in waiting_
  std::deque<waiting_call> waiting_;
  std::uint64_t last_waiting_id_ = 0;
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
