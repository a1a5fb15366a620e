#include "rendezvous/algorithm/dynamic_rendezvous.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client.h"
#include "rendezvous/algorithm/failure_board.h"
#include "rendezvous/algorithm/heartbeat_ring.h"
#include "rendezvous/algorithm/rank_table.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

namespace {

// `r/<r>/over` when the round ended because every node finished: the exit
// barrier's release. No failure reason reads like it (they name a node).
constexpr std::string_view every_node_finished = "every node finished";

std::set<std::string> local_interface_addresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[NI_MAXHOST];
    auto family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string s(text);
      out.insert(s.substr(0, s.find('%')));  // drop IPv6 zone ids
    }
  }
  freeifaddrs(list);
  return out;
}

// A timer setting that cannot overflow the clock, whatever value the
// options hold: negative is "now", beyond no_timeout is no_timeout.
std::chrono::milliseconds bounded(std::chrono::milliseconds d) {
  return std::clamp<std::chrono::milliseconds>(d, std::chrono::milliseconds::zero(), no_timeout);
}

}  // namespace

// A free port on `addr`, found by binding port 0 and letting it go again.
// Another process may take it before the worker binds it (torchrun has the
// same race); that is why workers use the agents' store by default.
int reserve_port(const std::string& addr) {
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(addr, ec);
  if (ec) address = asio::ip::address_v4::any();
  asio::ip::tcp::endpoint ep(address, 0);
  probe.open(ep.protocol(), ec);
  if (!ec) probe.bind(ep, ec);
  if (ec) return 0;
  return probe.local_endpoint(ec).port();
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host.empty()) return true;
  boost::system::error_code ec;
  auto literal = asio::ip::make_address(host, ec);
  if (!ec && literal.is_loopback()) return true;
  auto locals = local_interface_addresses();
  if (!ec) return locals.count(literal.to_string()) != 0;
  auto own = asio::ip::host_name(ec);
  if (!ec && (host == own || host.substr(0, host.find('.')) == own)) return true;
  // A name: does it resolve to one of our addresses?
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(host, "0", ec);
  if (ec) return false;
  for (const auto& r : results) {
    auto a = r.endpoint().address();
    if (a.is_loopback() || locals.count(a.to_string()) != 0) return true;
  }
  return false;
}

class dynamic_rendezvous::impl : public std::enable_shared_from_this<dynamic_rendezvous::impl> {
 public:
  impl(asio::io_context& io, dynamic_rendezvous_options options)
      : io_(io), options_(std::move(options)),
        ring_(std::make_shared<heartbeat_ring>(
            io, heartbeat_ring::settings{.interval = options_.keep_alive_interval,
                                         .max_attempt = options_.keep_alive_max_attempt})),
        deadline_timer_(io),
        warning_timer_(io),
        barrier_timer_(io) {
    if (!options_.log) {
      options_.log = [](const std::string& line) { fmt::print(stderr, "dtrun: {}\n", line); };
    }
    if (options_.host_store) {
      // Every interface: the other nodes reach us through the endpoint's
      // address, whichever interface that is.
      try {
        server_ = std::make_unique<store_server>(
            io_, store_server_options{.host = "",
                                      .port = options_.endpoint_port,
                                      .admit = make_admit(options_.store_access),
                                      .threads = options_.store_threads});
        options_.log(fmt::format("hosting the rendezvous store on port {}", server_->port()));
      } catch (const store_address_in_use&) {
        if (!options_.join_if_store_port_in_use) throw;
        options_.log(fmt::format(
            "port {} is in use on this machine (another node here hosts the store?); joining "
            "it as a client (--rdzv-conf is_host=1 insists on hosting)",
            options_.endpoint_port));
      }
    }
  }

  // --- keys -------------------------------------------------------------

  std::string key(const std::string& rest) const {
    return fmt::format("dtrun/{}/{}", options_.run_id, rest);
  }
  std::string round_key(std::int64_t r, const std::string& rest) const {
    return key(fmt::format("r/{}/{}", r, rest));
  }

  // Where the closer puts the rank assignment of the node that arrived
  // `arrival`-th in round r.
  std::string assignment_key(std::int64_t r, int arrival) const {
    return round_key(r, fmt::format("assign/{}", arrival));
  }

  // --- connections ------------------------------------------------------

  std::shared_ptr<round_store> make_client(std::chrono::milliseconds connect_timeout) {
    if (options_.store_factory) return options_.store_factory(connect_timeout);
    tcp_store_client_options o;
    o.host = server_ ? std::string("127.0.0.1") : options_.endpoint_host;
    o.port = server_ ? server_->port() : options_.endpoint_port;
    o.connect_timeout = connect_timeout;
    if (!server_) {
      // Once per run, not per round: the name is the same every time.
      o.on_first_resolve_failure = [weak = weak_from_this()](const std::string& why) {
        auto self = weak.lock();
        if (!self || std::exchange(self->resolve_warned_, true)) return;
        self->options_.log(fmt::format(
            "warning: cannot resolve the rendezvous endpoint '{}' ({}); retrying for up to {} s "
            "in case the name appears (a pod or job still starting); check --rdzv-endpoint",
            self->options_.endpoint_host, why, self->options_.join_timeout.count() / 1000));
      };
    }
    // The host's requests go to the store in this very process: they can
    // be slow (its loop serving thousands of nodes on a busy machine) but
    // not lost, and a timeout would end the job for every node because this
    // one was busy (seen with 1,024 agents on 2 cores). Other nodes give up
    // on a store that does not answer within close_timeout.
    o.timeout = server_ ? no_timeout : options_.close_timeout;
    return async_store_client::create(io_, o);
  }

  // The client for long waits (the round closing, `over`). On a TCPStore
  // it is a watch lane of `ops`: one connection per node, so one store
  // process can hold 10,000 of them. etcd's waits are watches anyway.
  std::shared_ptr<round_store> make_waits_client(const std::shared_ptr<round_store>& ops) {
    if (options_.store_factory) return options_.store_factory(options_.join_timeout);
    return std::static_pointer_cast<async_store_client>(ops)->watch_lane();
  }

  // A fresh connection each round: whatever a previous round left queued
  // (a long WAIT) cannot hold up this one.
  void reconnect(std::function<void(std::exception_ptr)> then) {
    if (ops_) ops_->close();
    if (waits_) waits_->close();
    ops_ = make_client(options_.join_timeout);
    waits_ = make_waits_client(ops_);
    auto pending = std::make_shared<int>(2);
    auto failed = std::make_shared<std::exception_ptr>();
    warn_if_no_host();
    auto self = shared_from_this();
    auto one_done = [self, pending, failed, then, epoch = epoch_](store_result r) {
      if (self->epoch_ != epoch) return;  // clients a later round closed
      if (r.error && !*failed) *failed = r.error;
      if (--*pending > 0) return;
      self->cancel(self->warning_timer_, self->warning_armed_);
      if (*failed) {
        then(*failed);
        return;
      }
      if (self->advertised_addr_.empty()) {
        // The host talks to its own store over loopback; others see it at
        // the endpoint's address.
        self->advertised_addr_ = !self->options_.local_addr.empty() ? self->options_.local_addr
                                 : self->server_ ? self->options_.endpoint_host
                                                 : self->ops_->local_address();
      }
      then(nullptr);
    };
    ops_->connect(one_done);
    waits_->connect(one_done);
  }

  void warn_if_no_host() {
    if (server_ || options_.store_factory) return;
    warning_timer_.expires_after(bounded(options_.no_host_warning));
    warning_timer_.async_wait([self = shared_from_this(), armed = ++warning_armed_](
                                  const boost::system::error_code& ec) {
      // Connected (or failed) meanwhile: an expiry queued before the
      // cancel must not say that nobody answers.
      if (ec || armed != self->warning_armed_) return;
      self->options_.log(fmt::format(
          "no store answers at {}:{} yet; the agent on that host hosts it: check that "
          "--rdzv-endpoint names the first node's address (or pass --rdzv-conf is_host=1 "
          "there) and that it is running; still retrying for up to {} s",
          self->options_.endpoint_host, self->options_.endpoint_port,
          self->options_.join_timeout.count() / 1000));
    });
  }

  // --- joining ----------------------------------------------------------

  void next_round(completion done) {
    if (auto abandoned = std::exchange(done_, nullptr)) {
      // Still exactly once: the call this one replaces ends with an error.
      asio::post(io_, [abandoned] {
        abandoned(store_error_ptr("the round was abandoned: next_round() was called again before it "
                           "completed"),
                  {});
      });
    }
    done_ = std::move(done);
    on_over_ = nullptr;
    pending_over_.clear();
    // Callbacks of the previous round (its WAIT on `over` fails when
    // reconnect() closes its client) must not touch this round's state.
    ++epoch_;
    round_over_ = false;
    all_done_ = false;
    ring_->stop();
    cancel(deadline_timer_, deadline_armed_);
    // An exit barrier of the last round that a failure ended: its timeout
    // must not fire in this round (it would stop our heartbeats).
    cancel(barrier_timer_, barrier_armed_);
    auto self = shared_from_this();
    reconnect([self, epoch = epoch_](std::exception_ptr error) {
      if (error) return self->fail(error);
      // In one request: whether the job failed on another node (then it
      // is over for us too), and the newest round anyone started (a
      // compare_set value, read as a value: not every store's counters
      // are values; absent before the first round). Both are set with
      // non-empty values, so empty means absent.
      self->ops_->read_now({self->key("failed"), self->key("round"), self->key("stopped")},
                           [self, epoch](store_result r) {
        if (self->epoch_ != epoch) return;  // a stale round's reply
        if (r.error) return self->fail(r.error);
        if (!r.values.at(0).empty()) return self->report_job_failed();
        // A person stopped the job on another node (Ctrl-C there).
        if (!r.values.at(2).empty()) {
          return self->fail(std::make_exception_ptr(job_stopped_error(r.values.at(2))));
        }
        const auto& round = r.values.at(1);
        // Join at once, without asking first whether the round has closed:
        // a node that arrives late learns it from its arrival index (past
        // the count in `closed`) and goes on to the next round, so the
        // common case costs one request and one round trip less.
        if (round.empty()) return self->join(self->last_round_ + 1);
        std::int64_t newest = 0;
        auto [end, ec] = std::from_chars(round.data(), round.data() + round.size(), newest);
        if (ec != std::errc() || end != round.data() + round.size() || newest < 0) {
          return self->fail(store_error_ptr(
              fmt::format("the round counter of run {} is corrupt", self->options_.run_id)));
        }
        self->join(std::max<std::int64_t>(newest, self->last_round_ + 1));
      });
    });
  }

  // The job failed on another node: say which, and which round failed
  // (set before `failed`, on the same connection), for the summary.
  void report_job_failed() {
    auto self = shared_from_this();
    auto epoch = epoch_;
    ops_->get(key("failed"), options_.close_timeout, [self, epoch](store_result why) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      self->ops_->get(self->key("failed_round"), self->options_.close_timeout,
                      [self, why, epoch](store_result r) {
                        if (self->epoch_ != epoch) return;  // a stale round's reply
                        std::int64_t failed_round = self->last_round_;
                        try {
                          if (!r.error) failed_round = std::stoll(r.value);
                        } catch (const std::exception&) {
                        }
                        self->fail(std::make_exception_ptr(job_failed_error(
                            fmt::format("the job failed on another node ({}); its restarts "
                                        "(--max-restarts={}) are used up",
                                        why.error ? std::string("reason unknown") : why.value,
                                        self->options_.max_restarts),
                            failed_round)));
                      });
    });
  }

  // Failure reports (failure_board.h) under dtrun/<run_id>/.
  void publish_failure(std::int64_t r, std::string record, std::function<void()> done) {
    if (!ops_) return done();
    failure_board::publish(ops_, key(""), r, std::move(record), std::move(done));
  }

  void round_failures(std::int64_t r, failures_completion done) {
    if (!ops_) return done({}, 0);
    auto self = shared_from_this();
    failure_board::read(ops_, key(""), r,
                        [self, r, done](std::vector<std::string> records, std::size_t total) {
                          if (total == 0) return done({}, 0);
                          self->mark_failures_read(
                              r, [done, records = std::move(records), total]() mutable {
                                done(std::move(records), total);
                              });
                        });
  }

  // The agent reads the failures just before it leaves a failed job. The
  // store's host must not leave first, or the others could not read them
  // (nor learn that the job failed): every node counts itself in, and the
  // host waits, bounded by close_timeout, until all members of the round
  // have.
  void mark_failures_read(std::int64_t r, std::function<void()> done) {
    auto self = shared_from_this();
    failure_board::mark_read(ops_, key(""), r, members_, [self, r, done](bool last) {
      // The last reader: everyone knows; an external store (etcd) drops
      // the job, so a new run with this id starts afresh.
      if (last) return self->release_job(done);
      if (!self->server_) return done();
      self->options_.log(fmt::format(
          "keeping the store up until the other nodes have read the failure reports (at most "
          "{} s)", self->options_.close_timeout.count() / 1000));
      failure_board::await_all_read(self->ops_, self->key(""), r, self->options_.close_timeout,
                                    done);
    });
  }

  // A round that is already closed is running without us: ask to be let
  // in (when there is room) and join the next one.
  void wait_for_next_round(std::int64_t r, int members) {
    auto self = shared_from_this();
    auto epoch = epoch_;
    if (members < options_.max_nodes) {
      options_.log(fmt::format("round {} is running with {} of at most {} nodes; asking to join",
                               r, members, options_.max_nodes));
      // Only if the round is still running: a SET would overwrite the exit
      // barrier's release (every node would then read "a node is waiting
      // to join" and restart a finished job) or another node's reason.
      end_round_first(r, "a node is waiting to join", [self, r, epoch](store_result o) {
        if (self->epoch_ != epoch) return;  // a stale round's reply
        if (o.error) return self->fail(o.error);
        if (o.value == every_node_finished) return self->fail_job_finished(r);
        self->join(r + 1);
      });
      return;
    }
    options_.log(fmt::format("round {} is full ({} nodes); waiting for the next one", r, members));
    waits_->get(round_key(r, "over"), options_.join_timeout, [self, r, epoch](store_result w) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      if (w.error) return self->fail(w.error);
      if (w.value == every_node_finished) return self->fail_job_finished(r);
      self->join(r + 1);
    });
  }

  // Ends round r with `reason` unless someone ended it first: the first
  // reason in `over` wins, so neither the exit barrier's release nor a
  // reported loss can be overwritten. `done` gets what `over` holds after.
  void end_round_first(std::int64_t r, std::string reason,
                       store_callback done = [](store_result) {}) {
    ops_->compare_set(round_key(r, "over"), "", std::move(reason), std::move(done));
  }

  void fail_job_finished(std::int64_t r) {
    fail(store_error_ptr(fmt::format(
        "the job finished (round {}) before this node could join; start it with the job's "
        "next run",
        r)));
  }

  void join(std::int64_t r) {
    round_ = r;
    auto self = shared_from_this();
    auto epoch = epoch_;
    ops_->compare_set(key("round"), std::to_string(r - 1), std::to_string(r), [](store_result) {});
    ops_->add(round_key(r, "joined"), 1, [self, r, epoch](store_result a) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      if (a.error) return self->fail(a.error);
      int index = static_cast<int>(a.number);
      self->arrival_ = index;
      // Beat from now on, before anyone knows our rank (heartbeat_ring.h).
      self->ring_->start(self->ops_, self->heartbeat_key(r, index));
      int worker_store_port = 0;
      try {
        worker_store_port = self->open_worker_store(r);
      } catch (const std::exception& e) {
        return self->fail(store_error_ptr(fmt::format(
            "cannot open the workers' store for round {}: {}; free file descriptors or "
            "ports on this node, or pass --rdzv-conf worker_store=rank0",
            r, e.what())));
      }
      node_descriptor me{.addr = self->advertised_addr_,
                         .hostname = asio::ip::host_name(),
                         .pid = static_cast<long>(::getpid()),
                         .nproc = self->options_.local_world_size,
                         .prev_rank = self->options_.fixed_rank >= 0 ? self->options_.fixed_rank
                                                                     : self->group_rank_,
                         .master_port = self->options_.workers_use_agent_store
                                            ? 0
                                            : reserve_port(self->advertised_addr_),
                         .worker_store_port = worker_store_port};
      self->ops_->set(self->round_key(r, fmt::format("node/{}", index)), to_text(me),
                      [](store_result) {});
      if (index < self->options_.min_nodes) {
        // Said once per round: what this node waits for, and how long.
        self->options_.log(fmt::format(
            "round {}: {} of at least {} node(s) here; waiting up to {} s for the others "
            "(--rdzv-conf join_timeout)",
            r, index, self->options_.min_nodes,
            std::chrono::duration<double>(self->options_.join_timeout).count()));
      }
      if (index == self->options_.max_nodes) {
        self->close_round(r, index);
      } else if (index == self->options_.min_nodes) {
        // Enough nodes: give latecomers last_call_timeout, then close with
        // whoever is there.
        self->deadline_timer_.expires_after(bounded(self->options_.last_call_timeout));
        self->deadline_timer_.async_wait([self, r, epoch, armed = ++self->deadline_armed_](
                                             const boost::system::error_code& ec) {
          // Only this arming: not an expiry queued before the round closed
          // or before a later round (maybe with the same number) re-armed it.
          if (ec || armed != self->deadline_armed_ || self->epoch_ != epoch || self->round_ != r) {
            return;
          }
          self->ops_->add(self->round_key(r, "joined"), 0, [self, r, epoch](store_result n) {
            if (self->epoch_ != epoch) return;  // a stale round's reply
            if (n.error) return self->fail(n.error);
            self->close_round(r, static_cast<int>(std::min<std::int64_t>(
                                     n.number, self->options_.max_nodes)));
          });
        });
      }
      self->await_close(r);
    });
  }

  // Several nodes may try to close a round (the max_nodes-th arrival, the
  // last call's timer); compare_set on `closing` lets the first count win.
  // The winner then publishes the assignments and `closed` in one request
  // (publish_ranks), so a node that sees `closed` finds its assignment.
  void close_round(std::int64_t r, int members) {
    auto self = shared_from_this();
    auto epoch = epoch_;
    auto count = std::to_string(members);
    ops_->compare_set(round_key(r, "closing"), "", count, [self, r, count, epoch](store_result c) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      if (c.error) return self->fail(c.error);
      if (c.value != count) return;  // someone else closed it, with another count
      self->publish_ranks(r, std::stoi(count));
    });
  }

  void publish_ranks(std::int64_t r, int members) {
    std::vector<std::string> keys;
    for (int i = 1; i <= members; ++i) keys.push_back(round_key(r, fmt::format("node/{}", i)));
    auto self = shared_from_this();
    auto epoch = epoch_;
    ops_->multi_get(keys, options_.close_timeout, [self, r, epoch](store_result all) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      if (all.error) return self->fail(all.error);
      std::vector<node_descriptor> nodes;
      try {
        for (const auto& v : all.values) nodes.push_back(descriptor_from_text(v));
      } catch (const std::exception& e) {
        return self->fail(store_error_ptr(fmt::format("a node descriptor in round {} is corrupt: {}", r,
                                               e.what())));
      }
      auto assignments = make_assignments(nodes, self->options_.worker_store_on_every_node
                                                     ? worker_store_choice::group_rank_0
                                                     : worker_store_choice::the_host);
      // One key per node, all in one request: each node reads only its
      // own, so a round costs every node the same whatever its size.
      // `closed` comes last: whoever sees it finds every assignment (the
      // etcd backend writes in order, in batches).
      std::vector<std::string> published, texts;
      for (std::size_t i = 0; i < assignments.size(); ++i) {
        published.push_back(self->assignment_key(r, static_cast<int>(i) + 1));
        texts.push_back(to_text(assignments[i]));
      }
      published.push_back(self->round_key(r, "closed"));
      texts.push_back(std::to_string(assignments.size()));
      self->ops_->multi_set(std::move(published), std::move(texts), [](store_result) {});
    });
  }

  void await_close(std::int64_t r) {
    auto self = shared_from_this();
    auto epoch = epoch_;
    waits_->wait({round_key(r, "closed")}, options_.join_timeout, [self, r, epoch](store_result c) {
      if (self->epoch_ != epoch) return;  // a stale round's reply
      if (c.error) {
        // Only the WAIT's own deadline means the nodes did not come; a store
        // that stopped answering (close_timeout) or was lost says so.
        try {
          std::rethrow_exception(c.error);
        } catch (const store_wait_timeout&) {
          auto error = store_error_ptr(fmt::format(
              "round {} did not gather {} node(s) within the join timeout ({} s); start the "
              "missing nodes or lower --nnodes",
              r, self->options_.min_nodes, self->options_.join_timeout.count() / 1000.0));
          if (r != 0 || self->arrival_ != 1) return self->fail(error);
          // The first round gathered this node alone: the job never
          // started. An external store (etcd) drops its keys now, so that
          // a rerun with this id starts afresh, unless someone joined
          // meanwhile (then the keys are theirs). No heartbeat after it.
          self->ring_->stop();
          self->ops_->release_unstarted(
              {self->key(""), fmt::format("dtrun/status/{}/", self->options_.run_id)},
              self->round_key(r, "joined"), 1, self->round_key(r, "closing"),
              [self, error, epoch](store_result) {
                if (self->epoch_ != epoch) return;  // a stale round's reply
                self->fail(error);
              });
          return;
        } catch (...) {
          return self->fail(c.error);
        }
      }
      // The count and our assignment in one request: a latecomer (an
      // arrival past the count) has none, and reads it as empty.
      self->waits_->read_now(
          {self->round_key(r, "closed"), self->assignment_key(r, self->arrival_)},
          [self, r, epoch](store_result t) {
            if (self->epoch_ != epoch) return;  // a stale round's reply
            if (t.error) return self->fail(t.error);
            int members = 0;
            if (!parse_count(t.values.at(0), members)) return self->fail_corrupt_count(r);
            if (self->arrival_ > members) {
              // We came in after the round closed: wait for the next one.
              return self->wait_for_next_round(r, members);
            }
            self->complete_round(r, members, t.values.at(1));
          });
    });
  }

  // A member count as the closer wrote it; false for anything else.
  static bool parse_count(const std::string& text, int& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out > 0;
  }

  void fail_corrupt_count(std::int64_t r) {
    fail(store_error_ptr(fmt::format("the member count of round {} in the store is corrupt", r)));
  }

  void complete_round(std::int64_t r, int members, const std::string& assignment_text) {
    rendezvous_info info;
    rank_assignment mine;
    try {
      mine = assignment_from_text(assignment_text);
    } catch (const std::exception& e) {
      return fail(store_error_ptr(fmt::format("this node's rank assignment in round {} is corrupt: {}",
                                       r, e.what())));
    }
    if (mine.successor_arrival > members) {
      return fail(store_error_ptr(fmt::format(
          "this node's rank assignment in round {} is corrupt: its ring successor arrived "
          "{}-th of {}", r, mine.successor_arrival, members)));
    }
    info.round = r;
    info.group_rank = mine.group_rank;
    info.group_world_size = members;
    info.first_rank = mine.first_rank;
    info.local_world_size = mine.nproc;
    info.world_size = mine.world_size;
    const auto& rank0_addr = mine.rank0_addr;
    const auto rank0_port = mine.rank0_port;
    const auto worker_port = mine.worker_port;
    const auto& worker_addr = mine.worker_addr;
    if (options_.fixed_rank >= 0 && info.group_rank != options_.fixed_rank) {
      return fail(store_error_ptr(fmt::format(
          "--node-rank={} is out of range or taken by another node; give every node a "
          "distinct --node-rank from 0 to {}",
          options_.fixed_rank, members - 1)));
    }
    info.store_host = options_.endpoint_host;
    info.store_port = server_ ? server_->port() : options_.endpoint_port;
    if (options_.workers_use_agent_store) {
      // Workers bootstrap from a store of the agents: no port to reserve,
      // so no bind-then-release race. Each round's is a fresh one that the
      // endpoint's host opened when it joined (torch >= 2.x workers do not
      // prefix their keys by round, so a reused store would hand the new
      // round the last round's gloo addresses). Without one (an external
      // `dtrun-store serve`, a host outside this round, a static
      // rendezvous, an older host) it is the endpoint store itself.
      info.master_addr = worker_addr.empty() ? info.store_host : worker_addr;
      info.master_port = worker_port > 0 ? static_cast<std::uint16_t>(worker_port)
                                         : info.store_port;
      // Every node opened a store; only group rank 0's serves the round.
      if (options_.worker_store_on_every_node && worker_server_) {
        if (info.group_rank == 0) {
          options_.log(fmt::format("round {}: this node (group rank 0) hosts the workers' store "
                                   "on port {}", r, worker_server_->port()));
        } else {
          worker_server_->stop();
          worker_server_.reset();
        }
      }
    } else {
      // torchrun 1.13's way: group rank 0's worker hosts a store on the
      // port its agent reserved.
      info.master_addr = rank0_addr;
      info.master_port = static_cast<std::uint16_t>(rank0_port);
    }
    group_rank_ = info.group_rank;
    members_ = members;
    last_round_ = r;
    cancel(deadline_timer_, deadline_armed_);
    // If this node dies, its connection closes and the server ends the
    // round for everyone at once.
    ops_->set_will(will_key(), round_key(r, "over"),
                   fmt::format("node {} ({}) was lost", group_rank_, advertised_addr_),
                   [](store_result) {});
    watch_over(r);
    watch_successor(r, mine.successor_arrival);
    if (auto done = std::exchange(done_, nullptr)) done(nullptr, std::move(info));
  }

  // Opens a fresh, empty store for the workers of round `r` and returns
  // its port, stopping the last round's (our own workers are stopped
  // before we rejoin; other nodes' stragglers losing it only end sooner).
  // Only the node that hosts the endpoint store does this, and only when
  // workers use the agents' store and fresh_worker_store is set (not for
  // the static backend). Returns 0 when it does not apply. Throws
  // store_error when no port can be bound.
  int open_worker_store(std::int64_t r) {
    if (!options_.workers_use_agent_store || !options_.fresh_worker_store) return 0;
    if (!server_ && !options_.worker_store_on_every_node) return 0;
    worker_server_.reset();
    worker_server_ = std::make_unique<store_server>(
        io_, store_server_options{.host = "", .port = 0,
                                  .admit = make_admit(options_.store_access),
                                  .threads = options_.store_threads});
    // With a store on every node, only group rank 0's serves: said once
    // the ranks are known (complete_round).
    if (server_) {
      options_.log(fmt::format("round {}: the workers' store is on port {}", r,
                               worker_server_->port()));
    }
    return worker_server_->port();
  }

  // One per member: a will is executed only while its key holds it, so a
  // key shared by the round's members would keep only the last writer's.
  std::string will_key() const {
    return fmt::format("dtrun/will/{}/{}/{}", options_.run_id, round_, group_rank_);
  }

  // --- while the round runs ---------------------------------------------

  void watch_over(std::int64_t r) {
    auto self = shared_from_this();
    waits_->get(round_key(r, "over"), no_timeout, [self, r, epoch = epoch_](store_result o) {
      if (self->epoch_ != epoch || self->round_ != r || self->round_over_) return;
      // Once every node is done the host leaves and its store with it: a
      // lost connection then is the end of the job, not of the round.
      if (o.error && self->all_done_) return;
      // The exit barrier's release (finish): the round ended well.
      if (!o.error && o.value == every_node_finished && self->finish_done_) {
        return self->leave(r, true);
      }
      self->round_over_ = true;
      self->ring_->stop();
      self->cancel(self->barrier_timer_, self->barrier_armed_);
      std::string reason = o.error ? self->lost_store_reason(o.error) : o.value;
      if (auto cb = std::exchange(self->on_over_, nullptr)) {
        cb(reason);
      } else {
        self->pending_over_ = reason;
      }
      if (auto f = std::exchange(self->finish_done_, nullptr)) {
        f(store_error_ptr(fmt::format("round {} ended before every node finished: {}", r, reason)));
      }
    });
  }

  // A member's heartbeat counter in round r, by its arrival index.
  std::string heartbeat_key(std::int64_t r, int arrival) const {
    return round_key(r, fmt::format("hb/{}", arrival));
  }

  // The heartbeat ring (heartbeat_ring.h) of round r: read the counter of
  // the node one group rank up, which arrived `successor_arrival`-th (0:
  // not known, an older closer; a round of one has no one to watch).
  void watch_successor(std::int64_t r, int successor_arrival) {
    if (members_ <= 1 || successor_arrival == 0) return;
    std::weak_ptr<impl> weak = shared_from_this();
    ring_->watch(heartbeat_key(r, successor_arrival), (group_rank_ + 1) % members_,
                 [weak, r](int lost) {
                   auto self = weak.lock();
                   if (!self || self->round_ != r || self->round_over_) return;
                   // From empty only: once every node finished, a successor
                   // that stopped beating because it left is not lost, and
                   // the release must not be overwritten.
                   self->end_round_first(
                       r, fmt::format("node {} stopped sending heartbeats", lost));
                 });
  }

  // Why a WAIT on `over` failed, for the log: the etcd backend says why
  // (its lease, the cluster's quorum); a TCPStore connection just closes.
  std::string lost_store_reason(const std::exception_ptr& error) const {
    if (!options_.store_factory) return "the connection to the rendezvous store was lost";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return fmt::format("the rendezvous store was lost: {}", e.what());
    }
  }

  void watch_round(std::function<void(std::string)> on_over) {
    if (!pending_over_.empty()) {
      auto reason = std::exchange(pending_over_, std::string());
      asio::post(io_, [on_over, reason] { on_over(reason); });
      return;
    }
    on_over_ = std::move(on_over);
  }

  // r/<r>/progress: ADD 1 by each node whose workers progressed since its
  // last tick (ADD 0 only reads), so every node sees the job's progress.
  void share_progress(bool progressed, std::function<void(std::int64_t)> done) {
    if (!ops_ || round_ < 0) return;
    ops_->add(round_key(round_, "progress"), progressed ? 1 : 0, [done](store_result n) {
      if (!n.error) done(n.number);
    });
  }

  // dtrun/status/<run_id>/<node rank> and .../nodes, read by `dtrun status`.
  void publish_status(std::string status_json, std::function<void()> stored) {
    if (!ops_ || round_ < 0) return;
    auto base = fmt::format("dtrun/status/{}/", options_.run_id);
    ops_->set(base + std::to_string(group_rank_), std::move(status_json), [](store_result) {});
    ops_->set(base + "nodes", std::to_string(members_), [stored](store_result r) {
      if (!r.error && stored) stored();
    });
  }

  // A round that ends in failure costs the job one restart, however many
  // nodes report it: workers of one collective often fail together, so
  // several nodes may get here for the same round before any has seen the
  // round end. The first reporter of the round (by ADD) counts it and
  // publishes the count; the others read that count.
  void report_failure(std::string reason, restart_completion done) {
    auto self = shared_from_this();
    round_over_ = true;  // our own doing: no on_over callback
    ring_->stop();
    auto r = round_;
    ops_->add(round_key(r, "failure_reports"), 1, [self, r, reason, done](store_result first) {
      if (first.error) return done(first.error, 0);
      if (first.number != 1) {
        self->ops_->get(self->round_key(r, "restarts"), self->options_.close_timeout,
                        [self, r, reason, done](store_result counted) {
                          if (counted.error) return done(counted.error, 0);
                          std::int64_t restarts = 0;
                          try {
                            restarts = std::stoll(counted.value);
                          } catch (const std::exception&) {
                            return done(store_error_ptr(fmt::format(
                                            "the restart count of round {} is corrupt", r)),
                                        0);
                          }
                          self->end_failed_round(r, reason, restarts, done);
                        });
        return;
      }
      self->ops_->add(self->key("restarts"), 1, [self, r, reason, done](store_result n) {
        if (n.error) return done(n.error, 0);
        if (n.number > self->options_.max_restarts) {
          // Out of restarts: the job is over for every node, not just us.
          self->mark_job_failed(fmt::format("node {}: {}", self->group_rank_, reason));
        }
        self->ops_->set(self->round_key(r, "restarts"), std::to_string(n.number),
                        [](store_result) {});
        self->end_failed_round(r, reason, n.number, done);
      });
    });
  }

  // Tells every node that round r is over, then answers with the job's
  // restart count.
  void end_failed_round(std::int64_t r, const std::string& reason, std::int64_t restarts,
                        const restart_completion& done) {
    auto over = round_key(r, "over");
    ops_->set(over, fmt::format("node {}: {}", group_rank_, reason), [](store_result) {});
    // A round trip before we answer: the caller may start the next round
    // at once, which closes this client, and the others must be told.
    ops_->check({over}, [done, restarts = static_cast<int>(restarts)](store_result) {
      done(nullptr, restarts);
    });
  }

  // Marks the job failed for every node. `failed_round` goes first, on the
  // same connection, so a node woken by `failed` finds the round whose
  // failure reports to read (report_job_failed).
  void mark_job_failed(const std::string& why) {
    ops_->set(key("failed_round"), std::to_string(round_), [](store_result) {});
    ops_->set(key("failed"), why, [](store_result) {});
  }

  void fail_job(std::string reason, std::function<void()> done) {
    auto self = shared_from_this();
    round_over_ = true;
    ring_->stop();
    auto why = fmt::format("node {}: {}", group_rank_, reason);
    mark_job_failed(why);
    ops_->set(round_key(round_, "over"), why, [](store_result) {});
    // A round trip, so both are applied before we leave (and close).
    ops_->check({key("failed")}, [done](store_result) { done(); });
  }

  // Ctrl-C on this node: `stopped` for nodes that join later, then the
  // round's `over` for those running it (unless something ended it first:
  // they then rejoin and read `stopped`). A round trip before `done`, so
  // both are applied before we leave, the store's host included.
  void stop_job(std::string reason, std::function<void()> done) {
    if (!ops_) return done();
    round_over_ = true;
    ring_->stop();
    // Before its first round this node has no rank yet: the host says where.
    auto who = last_round_ >= 0 ? fmt::format("node {} (host {}) {}", group_rank_,
                                              asio::ip::host_name(), reason)
                                : fmt::format("host {} {}", asio::ip::host_name(), reason);
    // One request after the other: an external store (etcd) may apply
    // requests sent together in any order, and the release must come last.
    auto self = shared_from_this();
    ops_->set(key("stopped"), who, [self, who, done](store_result) {
      if (self->round_ < 0) return self->await_stop_seen(done);
      self->end_round_first(self->round_, job_stopped_prefix + who,
                            [self, done](store_result) { self->await_stop_seen(done); });
    });
  }

  // After stop_job told the others. The store's host leaves last: its
  // store goes with it, and a node that lost it before reading why would
  // wait to rejoin instead. With an external store (etcd) the job is
  // dropped once every node has seen the stop, so a rerun with this run id
  // starts afresh instead of reading `stopped`.
  void await_stop_seen(std::function<void()> done) {
    auto self = shared_from_this();
    // Leaving after a stop is no loss: a will executed later would end a
    // round (or recreate a key of a released job) for nothing.
    ops_->withdraw_will(will_key(), [](store_result) {});
    auto release = [self, done] {
      if (!self->options_.store_factory) return done();
      self->release_job(done);
    };
    count_stop_seen([self, release](bool last) {
      if (last || self->members_ <= 1) return release();
      if (!self->server_ && !self->options_.store_factory) return release();
      self->options_.log(fmt::format("{} until the other nodes have seen the stop (at most {} s)",
                                     self->server_ ? "keeping the store up" : "waiting",
                                     self->options_.close_timeout.count() / 1000));
      self->ops_->wait({self->key("stop_seen_by_all")}, self->options_.close_timeout,
                       [release](store_result) { release(); });
    });
  }

  // Another node stopped the job (its reason ended our round): count
  // ourselves in, so that node may leave (await_stop_seen).
  void stop_seen(std::function<void()> done) {
    if (!ops_) return done();
    round_over_ = true;
    ring_->stop();
    ops_->withdraw_will(will_key(), [](store_result) {});
    count_stop_seen([done](bool) { done(); });
  }

  // Each node of the round counts itself once it knows the job was
  // stopped; the last one releases the node that stopped it (stop_job).
  void count_stop_seen(std::function<void(bool last)> done) {
    auto self = shared_from_this();
    ops_->add(key("stop_seen"), 1, [self, done](store_result n) {
      if (n.error || n.number < self->members_) return done(false);
      self->ops_->set(self->key("stop_seen_by_all"), "1", [done](store_result) { done(true); });
    });
  }

  // Exit barrier: count ourselves done; the last node releases everyone
  // by ending the round with `every_node_finished`. The WAIT on `over`
  // that every node holds anyway (watch_over) is the barrier: a node lost
  // meanwhile ends it too, with its own reason, and a node needs no second
  // connection (10,000 nodes finishing together would otherwise open
  // 10,000 at once).
  void finish(std::function<void(std::exception_ptr)> done) {
    finish_done_ = std::move(done);
    // Heartbeats go on: a node waiting here is alive, and its ring
    // predecessor, maybe still training, must not declare it lost.
    auto self = shared_from_this();
    auto r = round_;
    barrier_timer_.expires_after(bounded(options_.exit_barrier_timeout));
    barrier_timer_.async_wait([self, r, epoch = epoch_, armed = ++barrier_armed_](
                                  const boost::system::error_code& ec) {
      if (ec || armed != self->barrier_armed_ || self->epoch_ != epoch || self->round_ != r) {
        return;
      }
      self->options_.log(fmt::format(
          "exit barrier: not every node finished within {} s; leaving anyway",
          self->options_.exit_barrier_timeout.count() / 1000));
      self->leave(r, false);
    });
    // Leaving on purpose is not a loss: withdraw the will first.
    ops_->withdraw_will(will_key(), [](store_result) {});
    ops_->add(round_key(r, "done"), 1, [self, r](store_result n) {
      if (n.error) return self->finish_with(n.error);
      if (n.number < self->members_) return;
      // Only if no one ended the round first: a node lost just now must
      // not be covered up.
      self->end_round_first(r, std::string(every_node_finished));
    });
  }

  // After the barrier: every node says it saw the end before the host,
  // whose exit takes the store away, may go. Without this, a node whose
  // connection closed before it read the release would think the round had
  // ended badly and try to rejoin a store that is gone.
  void leave(std::int64_t r, bool everyone_done) {
    cancel(barrier_timer_, barrier_armed_);
    all_done_ = everyone_done;
    ring_->stop();
    if (!everyone_done) return finish_with(nullptr);
    auto self = shared_from_this();
    ops_->add(round_key(r, "left"), 1, [self, r](store_result n) {
      if (n.error) return self->finish_with(nullptr);
      bool last = n.number >= self->members_;
      // The last to leave releases the host, and the job's keys when the
      // store outlives the job (etcd).
      if (last) {
        self->ops_->set(self->round_key(r, "all_left"), "1", [](store_result) {});
        return self->release_job([self] { self->finish_with(nullptr); });
      }
      if (!self->server_ || last) return self->finish_with(nullptr);
      // The watch lane is free: its WAIT on `over` has returned.
      self->waits_->wait({self->round_key(r, "all_left")}, self->options_.close_timeout,
                           [self](store_result w) {
                             // Said, so that a lost goodbye (a bug: the last
                             // node sends it before it exits) is seen.
                             if (w.error) {
                               self->options_.log(fmt::format(
                                   "exit: not every node confirmed the end within {} s; "
                                   "leaving anyway",
                                   self->options_.close_timeout.count() / 1000.0));
                             }
                             self->finish_with(nullptr);
                           });
    });
  }

  // Drops dtrun/<run_id>/, the job's status keys and its (withdrawn) wills,
  // which live on their agents' leases and would otherwise stay until
  // those expire; best effort.
  void release_job(std::function<void()> done) {
    ops_->release(fmt::format("dtrun/status/{}/", options_.run_id), [](store_result) {});
    ops_->release(fmt::format("dtrun/will/{}/", options_.run_id), [](store_result) {});
    ops_->release(key(""), [done](store_result) { done(); });
  }

  void finish_with(std::exception_ptr error) {
    if (auto f = std::exchange(finish_done_, nullptr)) f(error);
  }

  void fail(std::exception_ptr error) {
    cancel(deadline_timer_, deadline_armed_);
    cancel(warning_timer_, warning_armed_);
    if (auto done = std::exchange(done_, nullptr)) done(error, {});
  }

  // Cancels `timer` and retires its current arming: a handler whose
  // expiry was queued before the cancel (Asio then runs it with success)
  // sees a generation that is no longer current and does nothing.
  static void cancel(asio::steady_timer& timer, std::uint64_t& armed) {
    ++armed;
    timer.cancel();
  }

  void shutdown() {
    ring_->stop();
    cancel(deadline_timer_, deadline_armed_);
    cancel(warning_timer_, warning_armed_);
    cancel(barrier_timer_, barrier_armed_);
    round_over_ = true;
    if (ops_) ops_->close();
    if (waits_) waits_->close();
    if (worker_server_) worker_server_->stop();
    if (server_) server_->stop();
  }

  asio::io_context& io_;
  dynamic_rendezvous_options options_;
  std::unique_ptr<store_server> server_;
  // This round's store for the workers (open_worker_store), when we host.
  std::unique_ptr<store_server> worker_server_;
  std::shared_ptr<round_store> ops_, waits_;
  std::shared_ptr<heartbeat_ring> ring_;
  asio::steady_timer deadline_timer_, warning_timer_, barrier_timer_;
  completion done_;
  std::function<void(std::string)> on_over_;
  std::function<void(std::exception_ptr)> finish_done_;
  std::string pending_over_;
  std::string advertised_addr_;
  std::int64_t round_ = -1, last_round_ = -1;
  int arrival_ = 0, group_rank_ = -1, members_ = 0;
  bool round_over_ = false;
  bool all_done_ = false;  // the exit barrier released every node
  bool resolve_warned_ = false;  // the endpoint's name did not resolve, said once
  std::uint64_t epoch_ = 0;  // next_round() calls so far
  // Generations of the timers: bumped by every arm and cancel.
  std::uint64_t deadline_armed_ = 0, warning_armed_ = 0, barrier_armed_ = 0;
};

dynamic_rendezvous::dynamic_rendezvous(asio::io_context& io, dynamic_rendezvous_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}

dynamic_rendezvous::~dynamic_rendezvous() { impl_->shutdown(); }

void dynamic_rendezvous::next_round(completion done) { impl_->next_round(std::move(done)); }
const std::string& dynamic_rendezvous::run_id() const { return impl_->options_.run_id; }
void dynamic_rendezvous::shutdown() { impl_->shutdown(); }
void dynamic_rendezvous::watch_round(std::function<void(std::string)> on_over) {
  impl_->watch_round(std::move(on_over));
}
void dynamic_rendezvous::report_failure(std::string reason, restart_completion done) {
  impl_->report_failure(std::move(reason), std::move(done));
}
void dynamic_rendezvous::fail_job(std::string reason, std::function<void()> done) {
  impl_->fail_job(std::move(reason), std::move(done));
}

void dynamic_rendezvous::stop_job(std::string reason, std::function<void()> done) {
  impl_->stop_job(std::move(reason), std::move(done));
}

void dynamic_rendezvous::stop_seen(std::function<void()> done) {
  impl_->stop_seen(std::move(done));
}

void dynamic_rendezvous::finish(std::function<void(std::exception_ptr)> done) {
  impl_->finish(std::move(done));
}
void dynamic_rendezvous::publish_failure(std::int64_t round, std::string record,
                                         std::function<void()> done) {
  impl_->publish_failure(round, std::move(record), std::move(done));
}
void dynamic_rendezvous::round_failures(std::int64_t round, failures_completion done) {
  impl_->round_failures(round, std::move(done));
}
void dynamic_rendezvous::share_progress(bool progressed,
                                        std::function<void(std::int64_t)> done) {
  impl_->share_progress(progressed, std::move(done));
}
void dynamic_rendezvous::publish_status(std::string status_json, std::function<void()> stored) {
  impl_->publish_status(std::move(status_json), std::move(stored));
}
store_server_stats dynamic_rendezvous::store_stats() const {
  return impl_->server_ ? impl_->server_->stats() : store_server_stats{};
}

std::uint16_t dynamic_rendezvous::worker_store_port() const {
  return impl_->worker_server_ ? impl_->worker_server_->port() : 0;
}

std::uint16_t dynamic_rendezvous::store_port() const {
  return impl_->server_ ? impl_->server_->port() : 0;
}

}  // namespace dtrun::rendezvous
