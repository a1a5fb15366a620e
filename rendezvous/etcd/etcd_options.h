// How dtrun reaches an etcd cluster: its members (--rdzv-endpoint, a comma
// list) and the TLS files of --rdzv-conf (protocol, cacert, cert, key), as
// torchrun's etcd backend takes them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/base/endpoint.h"

namespace dtrun::rendezvous {

inline constexpr std::uint16_t etcd_default_port = 2379;

struct etcd_options {
  std::vector<endpoint> members;
  bool tls = false;
  std::string cacert;  // empty: the system's trust store
  std::string cert, key;  // a client certificate, both or neither
  // How long one request may take before it is tried on another member;
  // etcd itself gives up on a proposal after about 7 s without quorum.
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
  // How long one try on one member may take before the call moves on to
  // the next: a member without a leader drops proposals and answers them
  // only after its own 7 s timeout, while a new leader is elected in about
  // two seconds. A try that timed out may have applied: only calls safe to
  // repeat are repeated (ADD checks its stamp first).
  std::chrono::milliseconds attempt_timeout = std::chrono::seconds(2);
  // The agent's lease: its wills vanish this long after it stops renewing.
  std::chrono::seconds lease_ttl = std::chrono::seconds(10);
  // The most bytes one reply body (or one line of a watch) may hold: a
  // reply of dtrun's calls is a few KiB; more is not etcd talking, and
  // must not cost the agent its memory.
  std::size_t max_reply_bytes = 16u << 20;
  // The job this agent belongs to (--rdzv-id): its keys live on a lease
  // that every agent of the job renews (etcd_session.h).
  std::string run_id;
  // Prepended to every key ("/dtrun/<run_id>/..." by default).
  std::string key_prefix = "/";
};

// "h1:2379,https://h2,[::1]:2380" -> members. A scheme, when given, must be
// the same for all and sets `tls` (https); nullopt with `error` set when a
// member is malformed.
std::optional<std::vector<endpoint>> parse_etcd_members(std::string_view text, bool& tls,
                                                        std::string& error);

// "h1:2379,h2:2379" for messages.
std::string members_text(const std::vector<endpoint>& members);

}  // namespace dtrun::rendezvous
