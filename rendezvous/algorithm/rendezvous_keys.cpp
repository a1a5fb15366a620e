#include "rendezvous/algorithm/rendezvous_keys.h"

#include <utility>

#include <fmt/format.h>

namespace dtrun::rendezvous {

rendezvous_keys::rendezvous_keys(std::string run_id)
    : run_id_(std::move(run_id)), prefix_(fmt::format("dtrun/{}/", run_id_)) {}

std::string rendezvous_keys::job_prefix() const { return prefix_; }
std::string rendezvous_keys::newest_round() const { return prefix_ + "round"; }
std::string rendezvous_keys::restarts() const { return prefix_ + "restarts"; }
std::string rendezvous_keys::failed() const { return prefix_ + "failed"; }
std::string rendezvous_keys::failed_round() const { return prefix_ + "failed_round"; }
std::string rendezvous_keys::stopped() const { return prefix_ + "stopped"; }
std::string rendezvous_keys::ended() const { return prefix_ + "ended"; }
std::string rendezvous_keys::machine(const std::string& machine_key) const {
  return prefix_ + "machine/" + machine_key;
}
std::string rendezvous_keys::quarantine_count() const { return prefix_ + "quarantine/count"; }
std::string rendezvous_keys::quarantine_entry(std::int64_t index) const {
  return prefix_ + "quarantine/" + std::to_string(index);
}
std::string rendezvous_keys::stop_seen() const { return prefix_ + "stop_seen"; }
std::string rendezvous_keys::stop_seen_by_all() const { return prefix_ + "stop_seen_by_all"; }

std::string rendezvous_keys::round_key(std::int64_t r, const std::string& rest) const {
  return fmt::format("{}r/{}/{}", prefix_, r, rest);
}

std::string rendezvous_keys::joined(std::int64_t r) const { return round_key(r, "joined"); }
std::string rendezvous_keys::node(std::int64_t r, int arrival) const {
  return round_key(r, fmt::format("node/{}", arrival));
}
std::string rendezvous_keys::closing(std::int64_t r) const { return round_key(r, "closing"); }
std::string rendezvous_keys::closed(std::int64_t r) const { return round_key(r, "closed"); }
std::string rendezvous_keys::assignment(std::int64_t r, int arrival) const {
  return round_key(r, fmt::format("assign/{}", arrival));
}
std::string rendezvous_keys::over(std::int64_t r) const { return round_key(r, "over"); }
std::string rendezvous_keys::returning(std::int64_t r) const {
  return round_key(r, "returning");
}
std::string rendezvous_keys::back(std::int64_t r) const { return round_key(r, "back"); }
std::string rendezvous_keys::heartbeat(std::int64_t r, int arrival) const {
  return round_key(r, fmt::format("hb/{}", arrival));
}
std::string rendezvous_keys::done(std::int64_t r) const { return round_key(r, "done"); }
std::string rendezvous_keys::left(std::int64_t r) const { return round_key(r, "left"); }
std::string rendezvous_keys::all_left(std::int64_t r) const { return round_key(r, "all_left"); }
std::string rendezvous_keys::round_restarts(std::int64_t r) const {
  return round_key(r, "restarts");
}
std::string rendezvous_keys::progress(std::int64_t r) const { return round_key(r, "progress"); }
std::string rendezvous_keys::work(std::int64_t r, int group_rank) const {
  return round_key(r, "work/" + std::to_string(group_rank));
}
std::string rendezvous_keys::stragglers(std::int64_t r) const {
  return round_key(r, "stragglers");
}
std::string rendezvous_keys::checkpoint(std::int64_t r) const {
  return round_key(r, "checkpoint");
}
std::string rendezvous_keys::preflight(std::int64_t r, int group_rank) const {
  return round_key(r, fmt::format("preflight/{}", group_rank));
}
std::string rendezvous_keys::preflight_verdict(std::int64_t r) const {
  return round_key(r, "preflight/verdict");
}

std::string rendezvous_keys::failures_key(std::int64_t r, const std::string& rest) const {
  return fmt::format("{}failures/{}/{}", prefix_, r, rest);
}

std::string rendezvous_keys::failure_count(std::int64_t r) const {
  return failures_key(r, "count");
}
std::string rendezvous_keys::failure(std::int64_t r, std::int64_t index) const {
  return failures_key(r, std::to_string(index));
}
std::string rendezvous_keys::failures_read(std::int64_t r) const {
  return failures_key(r, "read");
}
std::string rendezvous_keys::failures_all_read(std::int64_t r) const {
  return failures_key(r, "all_read");
}

std::string rendezvous_keys::status_prefix() const {
  return fmt::format("dtrun/status/{}/", run_id_);
}
std::string rendezvous_keys::status_node(int node_rank) const {
  return status_prefix() + std::to_string(node_rank);
}
std::string rendezvous_keys::status_nodes() const { return status_prefix() + "nodes"; }

std::string rendezvous_keys::will_prefix() const { return fmt::format("dtrun/will/{}/", run_id_); }
std::string rendezvous_keys::will(std::int64_t r, int group_rank) const {
  return fmt::format("{}{}/{}", will_prefix(), r, group_rank);
}

}  // namespace dtrun::rendezvous
