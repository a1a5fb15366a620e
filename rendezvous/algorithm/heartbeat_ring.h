// Liveness inside a round at O(1) per node and interval: each member adds
// 1 to its own counter (r/<r>/hb/<arrival>) and reads its ring successor's
// (the node of group rank + 1 mod N). A successor whose counter stands
// still for `max_attempt` intervals is declared lost once: a hung host
// whose TCP connection (c10d) or lease (etcd) is still alive. The same
// ring for every rendezvous backend.
//
// A node beats from the moment it joins, under its arrival index, not from
// when it learns its rank: the ranks of a round of thousands reach the
// nodes over seconds, and a successor that learned its rank last must not
// look lost to a predecessor that learned it first.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "rendezvous/base/generation_timer.h"
#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous {

class heartbeat_ring : public std::enable_shared_from_this<heartbeat_ring> {
 public:
  struct settings {
    std::chrono::milliseconds interval = std::chrono::seconds(5);
    int max_attempt = 3;
  };

  heartbeat_ring(boost::asio::io_context& io, settings s);

  // Starts beating: adds 1 to `own_counter` every interval (stopping a
  // previous start, and any watch).
  void start(std::shared_ptr<round_store> store, std::string own_counter);

  // From the next beat on, also reads `successor_counter`, the counter of
  // group rank `successor`. `on_lost(successor)` runs at most once per
  // start, on the loop. Only after start().
  void watch(std::string successor_counter, int successor, std::function<void(int)> on_lost);

  // No beat, read or on_lost after this, even from replies in flight.
  void stop();

 private:
  void schedule(std::uint64_t run);
  void beat(std::uint64_t run);

  generation_timer timer_;
  settings settings_;
  std::shared_ptr<round_store> store_;
  std::string own_counter_, successor_counter_;  // "": no successor watched
  std::function<void(int)> on_lost_;
  int successor_ = 0;
  std::int64_t last_seen_ = -1;
  int misses_ = 0;
  // Bumped by every start and stop: a reply or expiry of an older run does
  // nothing. `watched_` likewise for each watch, so a read sent before a
  // new watch does not count.
  std::uint64_t run_ = 0, watched_ = 0;
};

}  // namespace dtrun::rendezvous
