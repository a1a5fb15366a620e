#include "rendezvous/etcd/etcd_watch.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

std::chrono::milliseconds watch_retry_delay(unsigned failures, double unit) {
  constexpr std::chrono::milliseconds base = 100ms, cap = 5s;
  auto delay = base * (1ll << std::min(failures, 6u));
  delay = std::min<std::chrono::milliseconds>(delay, cap);
  unit = std::clamp(unit, 0.0, 1.0);
  return delay - std::chrono::milliseconds(static_cast<std::int64_t>(
                     static_cast<double>(delay.count()) / 2 * unit));
}

std::shared_ptr<etcd_watch> etcd_watch::start(asio::io_context& io, const etcd_options& options,
                                              std::shared_ptr<asio::ssl::context> tls, spec s,
                                              std::function<void(const etcd_event&)> on_event) {
  std::shared_ptr<etcd_watch> w(new etcd_watch(io, options, std::move(tls), std::move(s),
                                               std::move(on_event)));
  w->open();
  return w;
}

etcd_watch::etcd_watch(asio::io_context& io, const etcd_options& options,
                       std::shared_ptr<asio::ssl::context> tls, spec s,
                       std::function<void(const etcd_event&)> on_event)
    : options_(options), connection_(etcd_connection::create(io, options, std::move(tls))),
      retry_(io), spec_(std::move(s)), on_event_(std::move(on_event)),
      next_revision_(spec_.start_revision) {}

void etcd_watch::open() {
  json create{{"key", base64_encode(spec_.key)}};
  if (!spec_.range_end.empty()) create["range_end"] = base64_encode(spec_.range_end);
  if (next_revision_ > 0) create["start_revision"] = std::to_string(next_revision_);
  if (spec_.prev_kv) create["prev_kv"] = true;
  if (spec_.deletes_only) create["filters"] = json::array({"NOPUT"});
  json body{{"create_request", create}};
  auto self = shared_from_this();
  std::weak_ptr<etcd_watch> weak = self;
  auto attempt = ++attempt_;
  connection_->stream(
      "/v3/watch", body.dump(), options_.request_timeout,
      // Weak: the connection keeps this callback as long as it lives.
      [weak, attempt](std::string_view text) {
        auto s = weak.lock();
        if (s && !s->closed_ && attempt == s->attempt_) s->line(text);
      },
      [self, attempt](etcd_reply r) {
        if (!self->closed_ && attempt == self->attempt_) self->ended(r);
      });
}

void etcd_watch::line(std::string_view text) {
  etcd_watch_message message;
  if (!parse_watch_message(text, message).empty()) {
    // Not etcd's shape: this stream cannot be trusted any more; another
    // member (or this one, later) gets the watch.
    ++attempt_;
    connection_->next_member();
    return reopen_later();
  }
  if (message.canceled) {
    ++attempt_;
    connection_->next_member();
    if (message.compact_revision > 0 && spec_.on_compacted) {
      // What happened before it is gone for everyone: the owner reads the
      // state as it is now.
      auto told = std::exchange(spec_.on_compacted, nullptr);
      closed_ = true;
      connection_->close();
      on_event_ = nullptr;
      return told(message.compact_revision);
    }
    if (message.compact_revision > next_revision_) {
      // Resume at the oldest revision etcd still has: progress, at once.
      next_revision_ = message.compact_revision;
      return open();
    }
    // Cancelled for another reason (or a compaction that moves nothing):
    // asking again at once would only be cancelled again.
    return reopen_later();
  }
  if (message.created) failures_ = 0;
  for (const auto& ev : message.events) {
    if (ev.revision > 0 && ev.revision < next_revision_) continue;  // seen before a reconnect
    next_revision_ = std::max(next_revision_, ev.revision + 1);
    in_callback_ = true;
    on_event_(ev);
    in_callback_ = false;
    if (closed_) {
      // Closed from inside the callback: drop it now that it returned (it
      // may hold what holds this watch).
      on_event_ = nullptr;
      return;
    }
  }
}

void etcd_watch::ended(const etcd_reply&) {
  // The member died or ended the stream: resume elsewhere after a pause
  // (an election takes about a second; do not spin while there is none).
  connection_->next_member();
  reopen_later();
}

void etcd_watch::reopen_later() {
  auto delay = watch_retry_delay(failures_++, std::uniform_real_distribution<double>(0, 1)(random_));
  retry_.expires_after(delay);
  retry_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_) return;
    self->open();
  });
}

void etcd_watch::close() {
  closed_ = true;
  retry_.cancel();
  connection_->close();
  // It holds its owner too (and the slot that holds this watch).
  spec_.on_compacted = nullptr;
  // The callback often holds its owner, which holds this watch: release
  // it, unless it is running (line() releases it when it returns).
  if (!in_callback_) on_event_ = nullptr;
}

}  // namespace dtrun::rendezvous
