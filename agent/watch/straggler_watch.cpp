#include "agent/watch/straggler_watch.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace dtrun::agent {

straggler_watch::straggler_watch(boost::asio::io_context& io, straggler_rules rules,
                                 bool send_away, hooks h, std::chrono::milliseconds interval)
    : hooks_(std::move(h)),
      interval_(interval),
      detector_(rules),
      timer_(io),
      send_away_(send_away) {}

std::chrono::milliseconds straggler_watch::interval_for(int members) {
  return std::chrono::milliseconds(std::max(1000, members));
}

void straggler_watch::start_round(int group_rank, int members, std::string host) {
  stop();
  group_rank_ = group_rank;
  members_ = std::max(1, members);
  host_ = std::move(host);
  hosts_.assign(static_cast<std::size_t>(members_), std::string());
  detector_.reset();
  decided_.clear();
  leavers_ = 0;
  arm();
}

void straggler_watch::stop() {
  timer_.cancel();
  ++*generation_;
  in_flight_ = false;
  skipped_ = 0;
}

void straggler_watch::arm() {
  auto interval = interval_.count() > 0 ? interval_ : interval_for(members_);
  timer_.arm_after(interval, [this] { tick(); });
}

void straggler_watch::tick() {
  arm();  // first: a hook may stop() the watch, which must then hold
  // The last share still in flight (a slow store; node 0 reading many
  // keys): this interval's is skipped, not queued behind it. Not for ever:
  // a share the store failed never answers, so the fifth goes anyway.
  if (in_flight_ && ++skipped_ < max_skipped) {
    hooks_.debug("the last interval's straggler figures are still on their way; skipping this "
                 "interval's");
    return;
  }
  in_flight_ = true;
  skipped_ = 0;
  const bool gather = group_rank_ == 0;
  std::string work = encode_work(host_, hooks_.samples());
  hooks_.share(std::move(work), gather,
               [this, gather, generation = generation_, current = *generation_](
                   std::vector<std::string> per_node, std::string verdict,
                   straggler_room room) {
                 if (*generation != current) return;
                 in_flight_ = false;
                 // Node 0 wrote the verdict: it reads its own at once (the
                 // store's is the one it published an interval ago).
                 if (gather) return judge(per_node, room);
                 read_verdict(verdict);
               });
}

void straggler_watch::judge(const std::vector<std::string>& per_node,
                            const straggler_room& room) {
  std::vector<rank_work_sample> samples;
  for (std::size_t g = 0; g < per_node.size(); ++g) {
    if (per_node[g].empty()) continue;
    std::string error;
    node_work work = decode_work(per_node[g], error);
    if (!error.empty()) {
      hooks_.debug("node " + std::to_string(g) + "'s work figures do not read: " + error);
      continue;
    }
    if (g < hosts_.size()) hosts_[g] = work.host;
    for (rank_work_sample& sample : work.ranks) {
      sample.node_rank = static_cast<int>(g);  // the key says which node, not the text
      samples.push_back(sample);
    }
  }
  auto host_of = [this](int node) {
    const auto g = static_cast<std::size_t>(node);
    return g < hosts_.size() && !hosts_[g].empty() ? hosts_[g] : "node " + std::to_string(node);
  };
  auto name = [&](const std::vector<straggler_finding>& findings) {
    std::vector<named_straggler> out;
    for (const straggler_finding& finding : findings) {
      out.push_back({finding, host_of(finding.node_rank)});
      decide(out.back(), room);
    }
    return out;
  };
  std::vector<named_straggler> fresh = name(detector_.observe(samples));
  if (!fresh.empty()) hooks_.named(fresh);
  std::vector<named_straggler> now = name(detector_.current());
  hooks_.publish(encode_stragglers(now));
  hooks_.verdict(now);
}

// Once per node and round: a spare takes the leaver's place, else the job
// goes on smaller while it stays at --nnodes' minimum or above; else the
// node stays, saying why.
void straggler_watch::decide(named_straggler& named, const straggler_room& room) {
  auto known = decided_.find(named.finding.node_rank);
  if (known == decided_.end()) {
    std::pair<bool, std::string> d{false, ""};
    if (send_away_) {
      bool spare = leavers_ < room.spares;
      bool smaller = room.members - std::max(0, leavers_ - room.spares) - 1 >= room.min_nodes;
      d.first = spare || smaller;
      if (d.first) ++leavers_;
      if (!d.first) {
        d.second = fmt::format(
            "no spare node waits and the job is at --nnodes' minimum of {} node(s), so it "
            "stays",
            room.min_nodes);
      }
    }
    known = decided_.emplace(named.finding.node_rank, std::move(d)).first;
  }
  named.leaves = known->second.first;
  named.kept_because = known->second.second;
}

void straggler_watch::read_verdict(const std::string& verdict) {
  if (verdict.empty()) return hooks_.verdict({});
  std::string error;
  auto stragglers = decode_stragglers(verdict, error);
  if (!error.empty()) hooks_.debug("the job's straggler verdict does not read: " + error);
  hooks_.verdict(stragglers);
}

}  // namespace dtrun::agent
