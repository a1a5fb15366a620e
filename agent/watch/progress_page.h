// The progress page: one shared memory page per worker that the worker's
// `dtrun` Python module (agent/python/dtrun.py) writes and the agent reads,
// so that `dtrun.step(n)` and `with dtrun.section(name):` cost no system
// call (docs/agent.md, "Progress from the workers").
//
// The agent creates the page (a 4096-byte file in the worker's folder,
// DTRUN_PROGRESS_PAGE names it); the worker maps it shared and writes it
// from its training thread; the agent maps it read-only and reads it when
// it needs to (a status request, the section watch's tick).
//
// Layout, version 1: 512 little-endian signed 64-bit words (word N at
// byte 8N). The Python module writes the same offsets (its constants are
// checked against these by tests/unit/agent/watch/progress_page_test.cpp).
//   0  magic "DTRUNPG1"          written by the agent at creation
//   1  version (1)               the agent
//   2  page bytes (4096)         the agent
//   3  writer pid                the worker, once, when it attaches
//   4  sequence                  odd while the worker writes (a seqlock)
//   5  step                      the step running now (-1: none yet)
//   6  step start, monotonic ns  when dtrun.step() was called for it
//   7  steps done                completed steps (the ring's count)
//   8  current section           its slot, -1 none (slot 0 is "step")
//   9  current since, ns         when the rank became busy with it
//  10  open sections (depth)
//  11  named slots               how many section slots have a name
//  16  step ring: 16 entries of 5 words (step, start ns, end ns,
//      own-work ns, collective-wait ns), entry for completed step k
//      (1-based) at (k-1) % 16; own/wait are 0 until timed (issue 48,
//      item 2: the start-up hook's collective timing fills them)
// 128  sections: 24 slots of 13 words: the name (32 bytes, UTF-8, NUL
//      padded, 31 at most), the count of closed intervals, then a ring
//      of the last 8 intervals in ns, interval c (1-based) at (c-1) % 8.
//      Slot 0 is "step": the time between dtrun.step() calls.
// Times are CLOCK_MONOTONIC (Python's time.monotonic_ns, steady_clock).
//
// The worker is the only writer (one thread: its training loop). Each
// update is: sequence += 1 (odd), the words, sequence += 1 (even). A reader
// copies the page between two reads of an even, unchanged sequence, or
// tries again; it never sees half an update. The Python writer has no
// memory fences: its stores reach memory in program order on x86-64
// (TSO); on weakly ordered CPUs (aarch64) a reader could in principle see
// a torn record, and the agent treats every value as a hint (bounded
// ranges, a section only by its named slot).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

namespace progress_layout {
inline constexpr std::int64_t magic = 0x3147504E55525444;  // "DTRUNPG1", little-endian
inline constexpr std::int64_t version = 1;
inline constexpr std::size_t page_bytes = 4096;
inline constexpr std::size_t words = page_bytes / 8;
inline constexpr std::size_t w_magic = 0, w_version = 1, w_size = 2, w_writer_pid = 3,
                             w_sequence = 4, w_step = 5, w_step_start = 6, w_steps_done = 7,
                             w_current = 8, w_current_since = 9, w_depth = 10, w_named = 11;
inline constexpr std::size_t step_ring = 16, step_ring_entries = 16, step_entry_words = 5;
inline constexpr std::size_t sections = 128, section_slots = 24, section_words = 13;
inline constexpr std::size_t name_bytes = 32, name_words = name_bytes / 8;
inline constexpr std::size_t interval_ring = 8;
}  // namespace progress_layout

// One completed step, from the ring.
struct step_timing {
  std::int64_t step = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t own_ns = 0;   // own work (0: not timed)
  std::int64_t wait_ns = 0;  // waiting in collectives (0: not timed)
};

// One named section slot.
struct section_intervals {
  std::string name;
  std::uint64_t count = 0;            // closed intervals since the worker started
  std::vector<std::int64_t> recent;   // the last ones (at most 8), oldest first
};

// A consistent copy of a page, decoded.
struct progress_snapshot {
  pid_t writer_pid = 0;                 // 0: no worker attached yet
  std::optional<std::int64_t> step;     // the step running now
  std::int64_t step_start_ns = 0;
  std::uint64_t steps_done = 0;
  std::optional<int> current;           // slot of the section the rank is busy with
  std::int64_t current_since_ns = 0;
  int depth = 0;
  std::vector<section_intervals> sections;  // by slot; slot 0 is "step"
  std::vector<step_timing> recent_steps;    // oldest first, at most 16

  // The current section's name; nullopt when none (or unnamed).
  std::optional<std::string> current_name() const;
};

using progress_words = std::array<std::int64_t, progress_layout::words>;

// The page as the agent creates it: the header, step -1, no section.
progress_words empty_progress_page();

// Decodes a consistent copy. nullopt with `error` set (one line) when it is
// not a progress page or another version.
std::optional<progress_snapshot> decode_progress_page(const progress_words& page,
                                                      std::string& error);

// The agent's side of one worker's page: creates the file and maps it
// read-only. Not copyable; the mapping ends with the object (the file
// stays, in the worker's folder).
class progress_page {
 public:
  // Creates (or replaces) `path` with empty_progress_page() and maps it.
  // Throws std::runtime_error naming the path on failure.
  explicit progress_page(const std::string& path);
  ~progress_page();
  progress_page(const progress_page&) = delete;
  progress_page& operator=(const progress_page&) = delete;

  const std::string& path() const { return path_; }

  // A consistent copy (seqlock: a few tries, no wait); nullopt when the
  // worker was writing at each try (`error` empty) or the page is not one
  // (`error` says why).
  std::optional<progress_snapshot> read(std::string& error) const;

 private:
  std::string path_;
  std::int64_t* words_ = nullptr;
};

// One round's pages, by local rank.
class progress_pages {
 public:
  // Creates local_rank's page at `path` (progress_page's throws).
  void add(int local_rank, const std::string& path);
  // A new round: the pages of the last one are let go.
  void clear() { pages_.clear(); }
  bool empty() const { return pages_.empty(); }
  // local_rank's page now, when its writer is `pid` (a process the worker
  // started with its environment, or an earlier round's, is not it);
  // nullopt otherwise, or when it was being written at each try.
  std::optional<progress_snapshot> read(int local_rank, pid_t pid) const;

 private:
  std::map<int, std::unique_ptr<progress_page>> pages_;
};

// Copies `page` between two equal even sequence numbers (at most `tries`
// attempts); false when every attempt met a write. Exposed for the tests.
bool copy_consistent(const std::int64_t* page, progress_words& out, int tries);

}  // namespace dtrun::agent
