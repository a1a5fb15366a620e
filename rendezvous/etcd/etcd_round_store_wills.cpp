// The etcd client's last wills (etcd_round_store_client.h): keys bound to
// the agent's lease, executed by whichever member sees one vanish.
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_round_store_client.h"

namespace dtrun::rendezvous::etcd_client {

using json = nlohmann::json;

void etcd_round_store::set_will(std::string will, std::string target, std::string value,
                                store_callback done) {
  auto self = shared_from_this();
  enqueue([self, will = full(will), text = fmt::format("{}\n{}", full(target), value)](finish f) {
    self->watch_wills(will.substr(0, will.rfind('/') + 1));
    self->put(will, text, true, f);
  }, std::move(done));
}

void etcd_round_store::withdraw_will(std::string will, store_callback done) {
  // Emptied, not deleted: when the lease later takes the key away, the
  // delete carries no will to execute.
  auto self = shared_from_this();
  enqueue([self, will = full(will)](finish f) { self->put(will, "", true, f); }, std::move(done));
}

// Every member watches the wills of its round: a will that vanishes
// with its text (its agent's lease expired) is executed by whoever sees
// it first; the others find the target set, and change nothing.
void etcd_round_store::watch_wills(const std::string& dir) {
  if (!will_dirs_.insert(dir).second) return;
  auto self = shared_from_this();
  std::weak_ptr<etcd_round_store> weak = self;
  // From the first revision: a member that died before we looked counts.
  auto w = etcd_watch::start(
      io_, options_, session_->tls(),
      etcd_watch::spec{.key = dir, .range_end = prefix_end(dir), .start_revision = 1,
                       .prev_kv = true, .deletes_only = true},
      [weak](const etcd_event& e) {
        auto s = weak.lock();
        if (!s || !e.deleted) return;
        auto newline = e.prev_value.find('\n');
        if (newline == std::string::npos || newline == 0) return;  // withdrawn
        s->execute_will(e.prev_value.substr(0, newline), e.prev_value.substr(newline + 1));
      });
  watches_.push_back(w);
}

// Only when the target is absent: the first reason wins, as on the
// TCPStore server (store_session::execute_wills). A plain put overwrote a
// survivor's failure that had ended the round first, so two survivors
// could read two different ends of one round (issue 49).
void etcd_round_store::execute_will(const std::string& target, const std::string& value) {
  // Its own connection: this client's may be busy with a long wait.
  auto c = etcd_connection::create(io_, options_, session_->tls());
  auto key = base64_encode(target);
  json body{{"compare", json::array({json{{"key", key},
                                          {"result", "EQUAL"},
                                          {"target", "CREATE"},
                                          {"create_revision", "0"}}})},
            {"success", json::array({json{{"request_put",
                                           {{"key", key},
                                            {"value", base64_encode(value)},
                                            {"lease", job_lease_}}}}})}};
  c->post("/v3/kv/txn", body.dump(), options_.request_timeout, [c](etcd_reply) {});
}

}  // namespace dtrun::rendezvous::etcd_client
