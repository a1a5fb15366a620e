// One etcd watch over a key range, kept alive across member failures: when
// its connection drops it reconnects to the next member and resumes at the
// revision after the last event it delivered, so no event is lost or seen
// twice. Over etcd's HTTP gateway a watch needs a connection of its own.
//
// Reopening: a stream that ends, fails, is cancelled by etcd, or sends a
// line of the wrong shape is reopened on the next member after a capped
// exponential backoff with jitter (watch_retry_delay), reset once a stream
// is created again; never in a tight loop. A compacted start revision is
// handled as etcd's own clients do: the owner, told through on_compacted,
// reads the current state again and watches from there; without one, the
// watch resumes at the oldest revision etcd keeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <random>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_parse.h"

namespace dtrun::rendezvous {

// The pause before reopening a watch after `failures` failed tries in a
// row (0 for the first): 100 ms doubled per failure up to 5 s, of which a
// random part (`unit` in [0, 1)) takes up to half, so that the agents of a
// job do not all come back to a member at the same instant.
std::chrono::milliseconds watch_retry_delay(unsigned failures, double unit);

class etcd_watch : public std::enable_shared_from_this<etcd_watch> {
 public:
  struct spec {
    std::string key, range_end;  // raw bytes; range_end empty: the one key
    std::int64_t start_revision = 0;
    bool prev_kv = false;
    bool deletes_only = false;
    // Called (once; the watch then stops) when etcd compacted the revision
    // the watch must start from, with etcd's compact revision: the events
    // before it are gone, so the owner reads the state again. Unset: the
    // watch resumes at that revision by itself.
    std::function<void(std::int64_t compact_revision)> on_compacted;
  };

  // Starts watching at once. `on_event` runs on the loop for each event in
  // revision order. It never gives up by itself: a watch ends with close().
  static std::shared_ptr<etcd_watch> start(boost::asio::io_context& io, const etcd_options& options,
                                           std::shared_ptr<boost::asio::ssl::context> tls, spec s,
                                           std::function<void(const etcd_event&)> on_event);
  void close();

 private:
  etcd_watch(boost::asio::io_context& io, const etcd_options& options,
             std::shared_ptr<boost::asio::ssl::context> tls, spec s,
             std::function<void(const etcd_event&)> on_event);
  void open();
  void line(std::string_view text);
  void ended(const etcd_reply& r);
  void reopen_later();

  etcd_options options_;
  std::shared_ptr<etcd_connection> connection_;
  boost::asio::steady_timer retry_;
  spec spec_;
  std::function<void(const etcd_event&)> on_event_;
  std::int64_t next_revision_ = 0;
  bool closed_ = false;
  bool in_callback_ = false;
  std::uint64_t attempt_ = 0;
  unsigned failures_ = 0;
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace dtrun::rendezvous
