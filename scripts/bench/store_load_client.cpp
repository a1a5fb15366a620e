#include "scripts/bench/store_load_client.h"

#include <algorithm>
#include <span>

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "scripts/bench/store_bench.h"

namespace dtrun::bench::store_load {

command_bytes commands_of(wire::dialect d) {
  auto b = [d](wire::op o) { return *wire::byte_for(d, o); };
  return {b(wire::op::set), b(wire::op::get), b(wire::op::add), b(wire::op::wait),
          b(wire::op::num_keys)};
}

run_state::run_state(asio::io_context& context, options o, wire::dialect d)
    : io(context), opts(std::move(o)), cmd(commands_of(d)),
      validate_bytes(dtrun::bench::validate_bytes(d)) {}

void connector::start() {
  sockets_.reserve(count_);
  int first = std::min(count_, std::max(1, state_.opts.connect_concurrency));
  for (int i = 0; i < first; ++i) next();
  if (count_ == 0) done_(sockets_);
}

void connector::next() {
  if (started_ == count_) return;
  ++started_;
  auto socket = std::make_shared<tcp::socket>(state_.io);
  socket->async_connect(state_.endpoint, [self = shared_from_this(), socket](
                                             const boost::system::error_code& ec) {
    if (ec) {
      self->state_.error("connect: " + ec.message());
    } else {
      socket->set_option(tcp::no_delay(true));
      boost::system::error_code write_error;
      const std::string& hello = self->state_.validate_bytes;
      if (!hello.empty()) asio::write(*socket, asio::buffer(hello), write_error);
      if (write_error) self->state_.error("handshake: " + write_error.message());
      self->sockets_.push_back(std::move(*socket));
    }
    if (++self->finished_ == self->count_) {
      self->done_(self->sockets_);
    } else {
      self->next();
    }
  });
}

load_connection::load_connection(tcp::socket socket, run_state& state, int id)
    : socket_(std::move(socket)), state_(state) {
  const command_bytes& cmd = state_.cmd;
  const std::string key = fmt::format("/bench/{}/k{}", state_.run_id, id);
  value_ = fmt::format("v{}-", id);
  value_.resize(state_.opts.value_bytes, 'x');
  put_u8(set_wait_, cmd.set);
  put_str(set_wait_, key);
  put_str(set_wait_, value_);
  put_u8(set_wait_, cmd.wait);
  put_raw<std::uint64_t>(set_wait_, 1);
  put_str(set_wait_, key);
  put_u8(get_, cmd.get);
  put_str(get_, key);
  put_u8(add_, cmd.add);
  put_str(add_, fmt::format("/bench/{}/counter", state_.run_id));
  put_raw<std::int64_t>(add_, 1);
  buffer_.resize(std::max<std::size_t>(4096, state_.opts.value_bytes + 64));
}

void load_connection::start() {
  ++state_.running;
  next_op(clock_type::now());
}

// `now` doubles as the start of this op: reading the clock is a system
// call on some virtual machines, so each op reads it once.
void load_connection::next_op(clock_type::time_point now) {
  if (state_.stopping) {
    finish();
    return;
  }
  op_start_ = now;
  if (state_.opts.op == "add") {
    request(add_, step::add_reply);
  } else {
    request(set_wait_, step::wait_reply);
  }
}

void load_connection::request(const std::string& bytes, step expect) {
  expect_ = expect;
  have_ = 0;
  asio::async_write(socket_, asio::buffer(bytes),
                    [self = shared_from_this()](const boost::system::error_code& ec,
                                                std::size_t) {
                      if (ec) return self->fail("write: " + ec.message());
                      self->read();
                    });
}

void load_connection::read() {
  socket_.async_read_some(
      asio::buffer(buffer_.data() + have_, buffer_.size() - have_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (ec) return self->fail("read: " + ec.message());
        self->have_ += n;
        self->on_bytes();
      });
}

void load_connection::on_bytes() {
  // The reply's bytes as the codec defines them (wire::parse_reply).
  auto parsed = wire::parse_reply(answered(), std::span<const std::uint8_t>(buffer_.data(), have_),
                                  1, buffer_.size() - 8);
  if (parsed.status == wire::parse_status::bad) return fail(parsed.error);
  if (parsed.status == wire::parse_status::need_more) return read();
  if (have_ > parsed.consumed) return fail("more reply bytes than requested");
  switch (expect_) {
    case step::wait_reply:
      if (parsed.rep.byte != wire::wait_stop_waiting) {
        return fail(fmt::format("WAIT replied {}", int(parsed.rep.byte)));
      }
      return request(get_, step::get_reply);
    case step::get_reply:
      if (parsed.rep.value != value_) return fail("GET returned a different value");
      return op_done();
    case step::add_reply:
      ++state_.adds;
      return op_done();
  }
}

wire::op load_connection::answered() const {
  switch (expect_) {
    case step::wait_reply: return wire::op::wait;
    case step::get_reply: return wire::op::get;
    case step::add_reply: return wire::op::add;
  }
  return wire::op::wait;
}

void load_connection::op_done() {
  auto now = clock_type::now();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - op_start_).count();
  state_.latencies_ns.push_back(static_cast<std::uint32_t>(std::min<long long>(ns, UINT32_MAX)));
  ++state_.ops_total;
  if (now <= state_.deadline) {
    ++state_.ops_in_window;
  } else {
    state_.stopping = true;  // every connection stops after its current op
  }
  next_op(now);
}

void load_connection::fail(const std::string& what) {
  state_.error(what);
  boost::system::error_code ignored;
  socket_.close(ignored);
  finish();
}

void load_connection::finish() {
  if (finished_) return;
  finished_ = true;
  if (--state_.running == 0) state_.io.stop();
}

}  // namespace dtrun::bench::store_load
