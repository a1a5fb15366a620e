// The hosts of an ssh launch (docs/ssh.md): --hosts=h1,h2:4 or a hostfile
// in DeepSpeed's / MPI's format. Pure parsing, no I/O except reading the
// file, so every accepted and refused form is unit-tested.
//
//   --hosts=node1,node2:4,node[03-05]      "host[:slots]", comma separated;
//                                          a Slurm range expands to hosts
//   hostfile:  node1 slots=8               one host per line, optional
//              node[2-3] slots=4           slots=N (max_slots= is accepted
//              # a comment                 and ignored, as DeepSpeed does)
//
// Slots become that host's --nproc-per-node; a host without slots gets the
// --nproc-per-node of the command line. A host may be written user@host
// (ssh logs in as user; the rendezvous uses the host part).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

struct host_entry {
  std::string target;       // what ssh is given: "user@node1" or "node1"
  std::optional<int> slots;  // workers on this host; nullopt: --nproc-per-node

  // The host without "user@": the address the other hosts reach it at.
  std::string address() const;
};

// Parses --hosts' value. Throws usage_error naming --hosts and the bad
// part, for an empty list, an empty entry, bad slots (not a whole number
// from 1 to max_nproc_per_node), a malformed range or a repeated host.
std::vector<host_entry> parse_hosts_flag(std::string_view text);

// Parses a hostfile's text; `name` (the path) is named in errors with the
// line number. Same checks as parse_hosts_flag, plus unknown keys.
std::vector<host_entry> parse_hostfile(std::string_view text, const std::string& name);

// Reads and parses the file at `path`. Throws usage_error when it cannot
// be read.
std::vector<host_entry> read_hostfile(const std::string& path);

}  // namespace dtrun::launcher
