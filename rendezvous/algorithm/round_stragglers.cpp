// Stragglers (docs/stragglers.md; docs/rendezvous.md, "Stragglers"): each
// node of a running round SETs its work figures at r/<r>/work/<g> and reads
// the verdict r/<r>/stragglers in the same batch; the round's node 0 also
// reads every node's figures and SETs the verdict. Two requests per node
// and interval (four on the c10d store: the node's WAIT on `over` gives
// way to them and comes back); node 0's read is O(members) keys plus the
// round's arrivals (its spares) (docs/benchmarks.md, "Straggler figures at
// 10,000 nodes").
#include <algorithm>
#include <utility>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

void dynamic_rendezvous::impl::share_work(std::string node_work, bool gather,
                                          rendezvous_handler::work_completion done) {
  if (!ops_ || round_ < 0) return;
  ops_->set(keys_.work(round_, group_rank_), std::move(node_work),
            unheeded_("publish this node's work figures"));
  std::vector<std::string> keys{keys_.stragglers(round_)};
  const int nodes = gather ? members_ : 0;
  for (int g = 0; g < nodes; ++g) {
    keys.push_back(keys_.work(round_, g));
  }
  // Node 0 also reads how many arrived: its spares are those beyond the
  // round's members (as judge_preflight's room).
  if (gather) keys.push_back(keys_.joined(round_));
  const std::size_t expected = keys.size();
  preflight_room room{members_, 0, options_.min_nodes};
  ops_->read_now(std::move(keys), [done, nodes, expected, room](store_result r) mutable {
    if (r.error || r.values.size() != expected) return;
    std::vector<std::string> per_node(r.values.begin() + 1, r.values.begin() + 1 + nodes);
    if (nodes > 0) {
      auto joined = parse_whole<int>(r.values.back()).value_or(room.members);
      room.spares = std::max(0, joined - room.members);
    }
    done(std::move(per_node), std::move(r.values[0]), room);
  });
}

void dynamic_rendezvous::impl::publish_stragglers(std::string verdict) {
  if (!ops_ || round_ < 0) return;
  ops_->set(keys_.stragglers(round_), std::move(verdict),
            unheeded_("publish the job's stragglers"));
}

}  // namespace dtrun::rendezvous
