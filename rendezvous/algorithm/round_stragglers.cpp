// Stragglers (docs/stragglers.md; docs/rendezvous.md, "Stragglers"): each
// node of a running round SETs its work figures at r/<r>/work/<g> and reads
// the verdict r/<r>/stragglers in the same batch; the round's node 0 also
// reads every node's figures and SETs the verdict. Two requests per node
// and interval (four on the c10d store: the node's WAIT on `over` gives
// way to them and comes back); node 0's read is O(members) keys
// (docs/benchmarks.md, "Straggler figures at 10,000 nodes").
#include <utility>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

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
  ops_->read_now(std::move(keys), [done, nodes](store_result r) {
    if (r.error || r.values.size() != static_cast<std::size_t>(nodes) + 1) return;
    std::vector<std::string> per_node(r.values.begin() + 1, r.values.end());
    done(std::move(per_node), std::move(r.values[0]));
  });
}

void dynamic_rendezvous::impl::publish_stragglers(std::string verdict) {
  if (!ops_ || round_ < 0) return;
  ops_->set(keys_.stragglers(round_), std::move(verdict),
            unheeded_("publish the job's stragglers"));
}

}  // namespace dtrun::rendezvous
