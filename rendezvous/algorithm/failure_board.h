// The failure board: every node's failed workers, as records in the
// rendezvous' store, so that each node can name the first failure anywhere
// in the job (docs/rendezvous.md, "Failure reports"). Its keys
// (rendezvous_keys, under dtrun/<run_id>/):
//   failures/<r>/count     ADD 1 per record: its index; ADD 0 reads the total
//   failures/<r>/<i>       record i (at most max_records per round)
//   failures/<r>/read      ADD 1 by each node that read the round's records
//   failures/<r>/all_read  set by the node that brings `read` to the members
// The same board for every rendezvous backend; who waits for whom (the
// c10d store's host waits for all_read) is the round logic's policy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous::failure_board {

// Beyond this many records a round only counts them: the store stays small.
inline constexpr std::int64_t max_records = 64;

// Stores `record` (JSON text, a few KiB) for round r; `done` runs once,
// stored or not (a report is best effort: it never fails the job).
void publish(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
             std::int64_t r, std::string record, std::function<void()> done);

// Round r's records and how many were published (records may be fewer:
// the cap, or a node that died between its ADD and its SET, which the
// bounded wait skips). Never fails: on an error, what could be read.
void read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys, std::int64_t r,
          std::function<void(std::vector<std::string> records, std::size_t total)> done);

// Counts this node as having read round r's records. `done(last)`: last is
// true for the node that completed the count of `members` (it has set
// all_read), false otherwise or on an error.
void mark_read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
               std::int64_t r, int members, std::function<void(bool last)> done);

// Waits, at most `timeout`, until every member has read round r's records.
void await_all_read(const std::shared_ptr<round_store>& store, const rendezvous_keys& keys,
                    std::int64_t r, std::chrono::milliseconds timeout, std::function<void()> done);

}  // namespace dtrun::rendezvous::failure_board
