// The ranks of a round: what each node announces when it joins (a
// node_descriptor), how the closing node turns the descriptors into group
// ranks, and the assignment each node reads back (its own, nobody else's). Pure functions on JSON text, the
// same for every rendezvous backend (docs/rendezvous.md, "A round").
#pragma once

#include <string>
#include <vector>

namespace dtrun::rendezvous {

// One node as it announced itself for a round.
struct node_descriptor {
  std::string addr;
  std::string hostname;
  long pid = 0;
  int nproc = 1;
  int prev_rank = -1;  // its group rank in the round before, if any
  int master_port = 0;  // a port it reserved, for workers that host their own store
  // The port of the fresh store it opened for this round's workers (0 if
  // none): the endpoint's host under c10d, every node under etcd.
  int worker_store_port = 0;
  // The round record format it writes and reads (round_record.h); 0: an
  // older dtrun, whose round ends are sentences (absent in its text).
  int records = 0;
};

// JSON text, and back (throws std::exception on corrupt text). Names that
// are not UTF-8 become U+FFFD rather than throwing.
std::string to_text(const node_descriptor& d);
node_descriptor descriptor_from_text(const std::string& text);

// Group ranks for the arrivals of a round: a node keeps its previous rank
// when it is still in range and unclaimed; the others fill the free ranks
// in (address, pid) order, so the result depends only on the descriptors.
std::vector<int> assign_ranks(const std::vector<node_descriptor>& nodes);

// Which store the round's workers meet in.
enum class worker_store_choice {
  // The one node that opened a store (the c10d endpoint's host); the
  // workers reach it at the endpoint host.
  the_host,
  // Group rank 0's (every node opened one: etcd); reached at its address.
  group_rank_0,
};

// What one node reads to learn its place in the round: O(1) in the number
// of nodes, so a 10,000-node round moves no table to every node.
struct rank_assignment {
  int group_rank = 0;
  int first_rank = 0;  // its first worker's global rank (the lower ranks' nproc summed)
  int nproc = 1;
  int world_size = 1;  // every node's nproc summed
  std::string rank0_addr;
  int rank0_port = 0;  // rank 0's reserved port (worker_store=rank0)
  int worker_port = 0;  // 0: no fresh store; the endpoint's store serves
  std::string worker_addr;  // "": the endpoint host
  // The arrival index (1-based) of the node one group rank up, mod the
  // round's size: its heartbeat counter is the one this node reads. 0:
  // not known (a closer of an older dtrun wrote the assignment).
  int successor_arrival = 0;
  // The lowest and highest round record format among the round's nodes
  // (0: an older dtrun's, or a closer of an older dtrun wrote this), and
  // the host of a node whose format differs from the closer's ("": none,
  // or not known): a node runs the round only when both are its own
  // (docs/rendezvous.md, "Mixed versions").
  int records_min = 0;
  int records_max = 0;
  std::string odd_host;
};

// The closer's work: one assignment per node, in arrival order (entry i
// for the node that arrived (i+1)-th), each published under its own key.
std::vector<rank_assignment> make_assignments(const std::vector<node_descriptor>& nodes,
                                              worker_store_choice choice);

// An assignment as JSON text, and back (throws std::exception on corrupt
// text or values out of range).
std::string to_text(const rank_assignment& a);
rank_assignment assignment_from_text(const std::string& text);

}  // namespace dtrun::rendezvous
