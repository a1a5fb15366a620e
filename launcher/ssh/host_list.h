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
//
// A host list is bounded as a whole, before anything starts: at most
// max_hosts hosts (the most --nnodes accepts, so every agent takes the
// plan), and a hostfile at most max_hostfile_bytes and max_hostfile_lines.
// A range is expanded only while it fits, so "n[0-999999999]" costs
// nothing.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/base/number_parse.h"

namespace dtrun::launcher {

inline constexpr std::size_t max_hosts = static_cast<std::size_t>(max_nnodes);
inline constexpr std::size_t max_hostfile_bytes = 16 * 1024 * 1024;
inline constexpr std::size_t max_hostfile_lines = 1'000'000;

struct host_entry {
  std::string target;       // what ssh is given: "user@node1" or "node1"
  std::optional<int> slots;  // workers on this host; nullopt: --nproc-per-node

  // The host without "user@": the address the other hosts reach it at.
  std::string address() const;
};

// Parses --hosts' value. Throws usage_error naming --hosts and the bad
// part, for an empty list, an empty entry, bad slots (not a whole number
// from 1 to max_nproc_per_node), a malformed range, a repeated host or
// more than max_hosts hosts. The user's text in messages is printable()
// (a NUL shows as \x00, not the end of the message).
std::vector<host_entry> parse_hosts_flag(std::string_view text);

// Parses a hostfile's text; `name` (the path) is named in errors with the
// line number. Same checks as parse_hosts_flag, plus unknown or repeated
// keys and the bytes and lines bounds.
std::vector<host_entry> parse_hostfile(std::string_view text, const std::string& name);

// Reads and parses the file at `path`. Throws usage_error when it cannot
// be read, is not a regular file (a FIFO is refused at once, never waited
// on) or is over max_hostfile_bytes.
std::vector<host_entry> read_hostfile(const std::string& path);

}  // namespace dtrun::launcher
