// Slurm's compressed host lists and task counts, expanded by dtrun itself
// (no scontrol: it is not on every compute node, and a process per step
// start is slow at scale).
//
//   "node[1-3]"                 -> node1 node2 node3
//   "node[08-10]"               -> node08 node09 node10 (the low bound's width)
//   "rack[1-2]-gpu[1,3]"        -> rack1-gpu1 rack1-gpu3 rack2-gpu1 rack2-gpu3
//   "a,b[1-2],c"                -> a b1 b2 c
//   tasks per node "2(x3),1"    -> 2 2 2 1
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

// A host list or task count Slurm would not write; what() names the text.
class hostlist_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// More hosts than `limit`: expansion stops as soon as the count passes it,
// so a short text ("n[0-999999999]") costs no time or memory.
class hostlist_too_long : public hostlist_error {
 public:
  using hostlist_error::hostlist_error;
};

// The default bound of one host list (SLURM_JOB_NODELIST and the like).
inline constexpr std::size_t max_hostlist_hosts = 1'000'000;

// The longest host name (DNS's bound, RFC 1035): checked while a list is
// expanded, so a short text cannot expand into a few long names that fill
// the memory ("n[0-99999]" followed by 10,000 letters).
inline constexpr std::size_t max_host_name_length = 253;

// Every host of a host list, in Slurm's order (the last bracket group
// varies fastest). Throws hostlist_error on malformed text, and
// hostlist_too_long (what() says "more than <limit> hosts") when it holds
// more than `limit` hosts.
std::vector<std::string> expand_hostlist(std::string_view text,
                                         std::size_t limit = max_hostlist_hosts);

// The host list's expressions: `text` split on the commas outside
// brackets ("a,b[1,2]:2,c" -> "a", "b[1,2]:2", "c"). Throws hostlist_error
// on unbalanced or nested brackets.
std::vector<std::string_view> split_hostlist(std::string_view text);

// The first host of a host list, without expanding the rest.
std::string first_host(std::string_view text);

// SLURM_TASKS_PER_NODE's form ("2(x3),1") -> one count per node.
// Throws hostlist_error.
std::vector<int> expand_tasks_per_node(std::string_view text);

}  // namespace dtrun::launcher
