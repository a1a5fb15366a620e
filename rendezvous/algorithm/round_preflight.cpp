// --preflight's exchange (docs/rendezvous.md, "Preflight"): every node
// sets r/<r>/preflight/<group rank> to its figures; node 0 waits for them
// all (bounded), judges, and sets r/<r>/preflight/verdict, which the
// others wait for. The waits run on clients of their own: the round's
// watch lane holds the WAIT on `over`, and the ops client must stay free
// for the heartbeat ring.
#include <algorithm>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

void dynamic_rendezvous::impl::share_preflight(std::string figures,
                                               std::chrono::milliseconds timeout,
                                               rendezvous_handler::preflight_judge judge,
                                               std::function<void(std::string)> done) {
  if (!ops_ || phase_ != round_phase::running) {
    asio::post(io_, [done] { done(""); });
    return;
  }
  auto r = round_;
  ops_->set(keys_.preflight(r, group_rank_), std::move(figures),
            unheeded_("publish this node's preflight figures"));
  close_preflight_clients();
  preflight_clients_ = connect_(options_.join_timeout);
  auto ignore = [](store_result) {};
  preflight_clients_.ops->connect(ignore);
  preflight_clients_.waits->connect(ignore);  // unused; connected so that it closes as it should
  if (group_rank_ == 0) return judge_preflight(r, timeout, std::move(judge), std::move(done));
  // Twice as long: node 0's own wait may start later than ours (its check
  // ended after ours) and lasts up to `timeout`.
  preflight_clients_.ops->get(
      keys_.preflight_verdict(r), 2 * timeout,
      [self = shared_from_this(), t = ticket(), done](store_result verdict) {
        if (!self->current(t)) return;
        self->close_preflight_clients();
        done(verdict.error ? std::string() : verdict.value);
      });
}

// Node 0: every node's figures, or what came within `timeout`, and the
// room the round has (its spares: the arrivals beyond its members).
void dynamic_rendezvous::impl::judge_preflight(std::int64_t r, std::chrono::milliseconds timeout,
                                               rendezvous_handler::preflight_judge judge,
                                               std::function<void(std::string)> done) {
  std::vector<std::string> keys;
  for (int node = 0; node < members_; ++node) keys.push_back(keys_.preflight(r, node));
  auto lane = preflight_clients_.ops;
  // A timeout is an answer too: the nodes that published are judged.
  lane->wait(keys, timeout, [self = shared_from_this(), t = ticket(), lane, keys, r, judge,
                             done](store_result) {
    if (!self->current(t)) return;
    auto read = keys;
    read.push_back(self->keys_.joined(r));
    lane->read_now(read, [self, t, r, judge, done](store_result got) {
      if (!self->current(t)) return;
      self->close_preflight_clients();
      if (got.error || got.values.size() != static_cast<std::size_t>(self->members_) + 1) {
        return done("");
      }
      auto joined = parse_whole<int>(got.values.back()).value_or(self->members_);
      got.values.pop_back();
      preflight_room room{self->members_, std::max(0, joined - self->members_),
                          self->options_.min_nodes};
      auto verdict = judge(std::move(got.values), room);
      self->ops_->set(self->keys_.preflight_verdict(r), verdict,
                      self->unheeded_("publish the preflight's verdict"));
      done(std::move(verdict));
    });
  });
}

void dynamic_rendezvous::impl::close_preflight_clients() {
  auto clients = std::exchange(preflight_clients_, round_store_clients{});
  if (clients.waits) clients.waits->close();
  if (clients.ops) clients.ops->close();
}

}  // namespace dtrun::rendezvous
