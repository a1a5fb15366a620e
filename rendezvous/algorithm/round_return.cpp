// A restart round closes at once when every node that can come is here
// (docs/rendezvous.md, "Closing a restart round at once"), instead of
// after the last call: after a node loss the survivors would otherwise
// wait last_call_timeout (30 s by default) for a node that is gone.
//
// Who can come to round r: the arrivals of round r-1 (its members and its
// spares), less the node whose loss, silence or departure ended it
// (returning_nodes.h). The first of them back fixes that count with one
// compare_set, so every node counts with the same numbers; each of them
// then ADDs `back`. The round closes when `back` reaches the count and
// min_nodes have arrived: the node whose ADD completed the count checks
// the arrivals, and the min_nodes-th arrival checks `back`; each writes
// before it reads, so at least one of them sees both (the store orders
// them). Anything unsure counts a node as coming, which only falls back to
// the last call: a second loss the round's end does not name, a node that
// died after it was counted.
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

namespace dtrun::rendezvous {

// We come from round r-1: read how many arrived there and why it ended,
// and fix who can come (or learn what the first node back fixed).
void dynamic_rendezvous::impl::count_returner(std::int64_t r, int index) {
  // Counters are read through ADD 0 (the etcd backend's are not values).
  ops_->add(keys_.joined(r - 1), 0, [self = shared_from_this(), r, index,
                                     t = ticket()](store_result n) {
    if (!self->current(t)) return;  // a stale round's reply
    if (n.error) return self->fail(n.error);
    self->ops_->read_now({self->keys_.over(r - 1)}, [self, r, index, arrivals = n.number,
                                                     t](store_result o) {
      if (!self->current(t)) return;  // a stale round's reply
      if (o.error) return self->fail(o.error);
      self->fix_returning(r, index, arrivals, o.values.at(0));
    });
  });
}

void dynamic_rendezvous::impl::fix_returning(std::int64_t r, int index, std::int64_t arrivals,
                                             const std::string& over) {
  auto end = records::record_from_text(over);
  returning_nodes mine{static_cast<int>(arrivals), records::departed_rank(end).value_or(-1)};
  ops_->compare_set(keys_.returning(r), "", mine.to_text(), [self = shared_from_this(), r, index,
                                                             t = ticket()](store_result c) {
    if (!self->current(t)) return;  // a stale round's reply
    if (c.error) return self->fail(c.error);
    auto expected = returning_nodes::from_text(c.value);
    // Unreadable: nobody counts, and the last call closes the round.
    if (!expected) return;
    if (!expected->expects(self->from_arrival_, self->from_rank_)) {
      // Named as gone, or arrived at round r-1 after it was counted: a
      // newcomer here, not awaited.
      if (index == self->options_.min_nodes) self->check_everyone_here(r);
      return;
    }
    self->ops_->add(self->keys_.back(r), 1, [self, r, expected = *expected, t](store_result b) {
      if (!self->current(t)) return;  // a stale round's reply
      if (b.error) return self->fail(b.error);
      if (b.number < expected.expected()) return;  // others are still coming
      self->close_if_enough(r, expected);
    });
  });
}

// The min_nodes-th arrival, not one of those expected back: are they all
// back already? (Then the last of them saw fewer than min_nodes arrivals.)
void dynamic_rendezvous::impl::check_everyone_here(std::int64_t r) {
  if (r == 0) return;  // the first round has no one to wait for but the last call
  ops_->read_now({keys_.returning(r)}, [self = shared_from_this(), r,
                                        t = ticket()](store_result f) {
    if (!self->current(t)) return;  // a stale round's reply
    if (f.error) return self->fail(f.error);
    auto expected = returning_nodes::from_text(f.values.at(0));
    if (!expected || expected->expected() < 1) return;  // nobody is back yet
    self->ops_->add(self->keys_.back(r), 0, [self, r, expected = *expected, t](store_result b) {
      if (!self->current(t)) return;  // a stale round's reply
      if (b.error) return self->fail(b.error);
      if (b.number < expected.expected()) return;  // the last one back will check
      self->close_if_enough(r, expected);
    });
  });
}

// Every node expected back is here: close with the arrivals so far (read
// after their ADDs to `back`, so it counts every one of them), once there
// are min_nodes; otherwise the min_nodes-th arrival closes.
void dynamic_rendezvous::impl::close_if_enough(std::int64_t r, const returning_nodes& expected) {
  ops_->add(keys_.joined(r), 0, [self = shared_from_this(), r, expected,
                                 t = ticket()](store_result n) {
    if (!self->current(t)) return;  // a stale round's reply
    if (n.error) return self->fail(n.error);
    if (n.number < self->options_.min_nodes) return;
    auto count = closing_count(n.number, self->options_.max_nodes, self->options_.node_unit);
    auto gone = expected.departed >= 0 ? fmt::format(", node {} gone", expected.departed)
                                       : std::string();
    self->close_round(
        r, count,
        fmt::format("round {}: every node that can come is here ({} back from round {}{}; {} "
                    "arrived); closing with {} node(s) without waiting for the last call",
                    r, expected.expected(), r - 1, gone, n.number, count));
  });
}

}  // namespace dtrun::rendezvous
