// Stragglers (docs/stragglers.md): while a round's workers run, this node
// shares its ranks' own work per step (from their progress pages) every
// interval; the round's node 0 judges every node's and names a straggler
// in one line and a `straggler` event; every node reads the verdict
// (`dtrun status`, /metrics), and a node named with room to lose it leaves
// (--straggler-action leave) or is quarantined.
#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "agent/health/machine_identity.h"
#include "agent/policy/elastic_agent_impl.h"
#include "agent/watch/straggler_codec.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace {

// The `straggler` event: the verdict's own fields (straggler_json), those
// an event line keeps for its writer (host, node_rank) and ranks named
// straggler_*, then the action and the line node 0 wrote.
nlohmann::ordered_json event_fields(const named_straggler& named, preflight_action action) {
  nlohmann::ordered_json fields;
  const auto verdict = straggler_json(named);
  for (const auto& [key, value] : verdict.items()) {
    const bool writers = key == "host" || key == "node_rank" || key == "ranks";
    fields[writers ? "straggler_" + key : key] = value;
  }
  fields["action"] = preflight_action_name(action);
  fields["line"] = describe(named.finding, named.host);
  return fields;
}

}  // namespace

// Python workers with the start-up hook only: it makes `import dtrun`
// work and times DDP and the collectives (--worker-timing=off: nothing is
// timed, so nothing is judged).
void elastic_agent::impl::start_straggler_watch() {
  if (hook_dir_.empty() || !options_.stragglers.worker_timing) return;
  straggler_watch::hooks hooks;
  hooks.samples = [this] { return straggler_samples(); };
  hooks.share = [this](std::string work, bool gather, straggler_watch::share_done done) {
    rendezvous_.share_work(std::move(work), gather,
                           [done](std::vector<std::string> per_node, std::string verdict,
                                  rendezvous::preflight_room room) {
                             done(std::move(per_node), std::move(verdict),
                                  straggler_room{room.members, room.spares, room.min_nodes});
                           });
  };
  hooks.publish = [this](std::string verdict) {
    rendezvous_.publish_stragglers(std::move(verdict));
  };
  hooks.named = [this](const std::vector<named_straggler>& fresh) { stragglers_named(fresh); };
  hooks.verdict = [this](const std::vector<named_straggler>& now) { straggler_verdict(now); };
  hooks.debug = [this](const std::string& line) { log_debug(line); };
  bool send_away = options_.stragglers.action != preflight_action::warn;
  // Three intervals covering 20 steps, not the detector's two and ten: a
  // rank of a CPU-bound job on a shared, oversubscribed host can run 2x
  // slow for two seconds (seen on the 2-CPU CI machine); a straggler stays
  // slow. Still within 20 + 50 steps at 10 steps a second.
  straggler_rules rules;
  rules.min_samples = 3;
  rules.min_slow_steps = 20;
  stragglers_.watch.emplace(io_, rules, send_away, std::move(hooks));
}

void elastic_agent::impl::start_straggler_round(const rendezvous::rendezvous_info& info) {
  stragglers_.published.clear();
  stragglers_.verdict.clear();
  stragglers_.said = false;
  stragglers_.quarantine = false;
  if (stragglers_.watch) {
    stragglers_.watch->start_round(info.group_rank, info.group_world_size, this_host_name());
  }
}

// The verdict was the round's: `dtrun status` and /metrics stop showing it
// (its node ranks were that round's).
void elastic_agent::impl::stop_straggler_watch() {
  if (stragglers_.watch) stragglers_.watch->stop();
  stragglers_.verdict.clear();
}

// Each running rank's steps finished since the last share, from its page.
std::vector<rank_work_sample> elastic_agent::impl::straggler_samples() {
  std::vector<rank_work_sample> samples;
  for (const auto& w : group_.workers()) {
    if (!w.alive()) continue;
    auto page = pages_.read(w.local_rank, w.pid);
    if (!page) continue;
    std::vector<timed_step> steps;
    for (const auto& s : page->recent_steps) steps.push_back({s.step, s.own_ns});
    auto& after = stragglers_.published
                      .try_emplace(w.local_rank, std::numeric_limits<std::int64_t>::min())
                      .first->second;
    if (auto sample = summarize_steps(w.rank, round_info_.group_rank, steps, after)) {
      after = sample->last_step;
      samples.push_back(*sample);
    }
  }
  return samples;
}

// Node 0: a straggler named for the first time in this streak.
void elastic_agent::impl::stragglers_named(const std::vector<named_straggler>& fresh) {
  auto action = options_.stragglers.action;
  for (const auto& named : fresh) {
    log(fmt::format("warning: {}{}", printable(describe(named.finding, named.host)),
                    verdict_consequence("straggler-action", action, named.leaves,
                                        named.kept_because)));
    reporter_.straggler(event_fields(named, action));
  }
}

// Every node: the job's verdict as read. A node named here hears it once
// a streak; one the verdict sends away leaves while its workers run.
void elastic_agent::impl::straggler_verdict(const std::vector<named_straggler>& now) {
  stragglers_.verdict = now;
  auto mine = std::find_if(now.begin(), now.end(), [this](const named_straggler& n) {
    return n.finding.node_rank == round_info_.group_rank;
  });
  if (mine == now.end()) {
    stragglers_.said = false;  // fast again: a new streak is said again
    return;
  }
  std::string line = printable(describe(mine->finding, mine->host));
  if (!mine->leaves) {
    if (!stragglers_.said && round_info_.group_rank != 0) {
      log(fmt::format("warning: this node is named a straggler: {}", line));
    }
    stragglers_.said = true;
    return;
  }
  if (phase_ != phase::running || stopping_for<stop::unhealthy>()) return;
  stragglers_.quarantine = options_.stragglers.action == preflight_action::quarantine;
  if (stragglers_.quarantine && machine_key_.empty()) {
    machine_key_ = this_machine_identity(env_.nvml()).key;
  }
  leave_unhealthy(fmt::format("straggler: {} (--straggler-action={})", line,
                              preflight_action_name(options_.stragglers.action)));
}

}  // namespace dtrun::agent
