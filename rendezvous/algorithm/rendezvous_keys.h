// Every key the rendezvous writes or reads, spelled once: the key table of
// docs/rendezvous.md, one function per row. The algorithm, the failure
// board, the heartbeat ring's caller, the status publication and
// `dtrun status` (launcher/status/status_store.cpp) all ask this type, so a key
// cannot drift between the writer and its readers.
//
// All keys of a run live under `dtrun/<run_id>/` except the status keys
// (`dtrun/status/<run_id>/`) and the last wills (`dtrun/will/<run_id>/`),
// which the store may drop by prefix apart from the job's keys.
#pragma once

#include <cstdint>
#include <string>

namespace dtrun::rendezvous {

// The quarantine list's entries the store keeps (quarantine/<i>).
inline constexpr std::int64_t max_quarantine_entries = 64;

class rendezvous_keys {
 public:
  explicit rendezvous_keys(std::string run_id);

  const std::string& run_id() const { return run_id_; }

  // --- the job: dtrun/<run_id>/... ---------------------------------------
  std::string job_prefix() const;        // dtrun/<run_id>/
  std::string newest_round() const;      // round
  std::string restarts() const;          // restarts (job-wide count)
  std::string failed() const;            // failed
  std::string failed_round() const;      // failed_round
  std::string stopped() const;           // stopped
  std::string stop_seen() const;         // stop_seen
  std::string stop_seen_by_all() const;  // stop_seen_by_all
  // The job ended (finished, failed or stopped): what a node outside any
  // round (in quarantine) waits for.
  std::string ended() const;  // ended

  // --- quarantine: dtrun/<run_id>/... -------------------------------------
  std::string machine(const std::string& machine_key) const;  // machine/<key>
  std::string quarantine_count() const;                        // quarantine/count
  // quarantine/<i>, for i below max_quarantine_entries: beyond, the list
  // only counts (the store stays small).
  std::string quarantine_entry(std::int64_t index) const;

  // --- a round: dtrun/<run_id>/r/<r>/... ---------------------------------
  std::string joined(std::int64_t r) const;
  std::string node(std::int64_t r, int arrival) const;
  std::string closing(std::int64_t r) const;
  std::string closed(std::int64_t r) const;
  std::string assignment(std::int64_t r, int arrival) const;
  std::string over(std::int64_t r) const;
  // Who can come to restart round r (returning_nodes.h), and how many of
  // them are back (a counter).
  std::string returning(std::int64_t r) const;
  std::string back(std::int64_t r) const;
  std::string heartbeat(std::int64_t r, int arrival) const;
  std::string done(std::int64_t r) const;
  std::string left(std::int64_t r) const;
  std::string all_left(std::int64_t r) const;
  std::string round_restarts(std::int64_t r) const;  // r/<r>/restarts
  std::string progress(std::int64_t r) const;
  // The round's job-wide checkpoint request (--checkpoint-signal): who.
  std::string checkpoint(std::int64_t r) const;
  // Stragglers (docs/stragglers.md): each node's work figures of the last
  // interval, and the verdict node 0 makes of them.
  std::string work(std::int64_t r, int group_rank) const;  // r/<r>/work/<g>
  std::string stragglers(std::int64_t r) const;            // r/<r>/stragglers
  // --preflight: each node's figures (r/<r>/preflight/<group rank>) and
  // node 0's verdict (r/<r>/preflight/verdict).
  std::string preflight(std::int64_t r, int group_rank) const;
  std::string preflight_verdict(std::int64_t r) const;

  // --- the failure board: dtrun/<run_id>/failures/<r>/... -----------------
  std::string failure_count(std::int64_t r) const;
  std::string failure(std::int64_t r, std::int64_t index) const;
  std::string failures_read(std::int64_t r) const;
  std::string failures_all_read(std::int64_t r) const;

  // --- status, read by `dtrun status`: dtrun/status/<run_id>/... ----------
  std::string status_prefix() const;
  std::string status_node(int node_rank) const;
  std::string status_nodes() const;

  // --- last wills: dtrun/will/<run_id>/<r>/<group rank> --------------------
  std::string will_prefix() const;
  std::string will(std::int64_t r, int group_rank) const;

 private:
  std::string round_key(std::int64_t r, const std::string& rest) const;
  std::string failures_key(std::int64_t r, const std::string& rest) const;

  std::string run_id_;
  std::string prefix_;  // dtrun/<run_id>/
};

}  // namespace dtrun::rendezvous
