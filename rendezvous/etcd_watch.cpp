#include "rendezvous/etcd_watch.h"

#include <algorithm>

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string decoded(const json& kv, const char* field) {
  auto it = kv.find(field);
  if (it == kv.end() || !it->is_string()) return {};
  return base64_decode(it->get<std::string>()).value_or(std::string());
}

}  // namespace

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
  auto message = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) return;
  auto result = message.find("result");
  if (result == message.end() || !result->is_object()) return;
  if (result->value("canceled", false)) {
    // Our start revision was compacted away: resume at the oldest one
    // etcd still has (what happened before it is gone for everyone).
    auto compacted = integer_of(result->value("compact_revision", json()));
    if (compacted > next_revision_) next_revision_ = compacted;
    connection_->next_member();
    return open();
  }
  auto events = result->find("events");
  if (events == result->end() || !events->is_array()) return;
  for (const auto& e : *events) {
    if (!e.is_object() || !e.contains("kv")) continue;
    const auto& kv = e["kv"];
    etcd_event ev;
    ev.deleted = e.value("type", std::string()) == "DELETE";
    ev.key = decoded(kv, "key");
    ev.value = decoded(kv, "value");
    if (e.contains("prev_kv") && e["prev_kv"].is_object()) ev.prev_value = decoded(e["prev_kv"], "value");
    ev.revision = integer_of(kv.value("mod_revision", json()));
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
  retry_.expires_after(100ms);
  retry_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_) return;
    self->open();
  });
}

void etcd_watch::close() {
  closed_ = true;
  retry_.cancel();
  connection_->close();
  // The callback often holds its owner, which holds this watch: release
  // it, unless it is running (line() releases it when it returns).
  if (!in_callback_) on_event_ = nullptr;
}

}  // namespace dtrun::rendezvous
