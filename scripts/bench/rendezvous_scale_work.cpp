#include "scripts/bench/rendezvous_scale_work.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "agent/watch/straggler_codec.h"
#include "rendezvous/store/wire_codec.h"

using namespace dtrun::agent;

namespace scale_work {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double thread_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double process_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// Runs `f` on the loop's thread and returns its value here.
template <typename F>
auto on_loop(boost::asio::io_context& io, F f) -> decltype(f()) {
  auto result = std::make_shared<std::promise<decltype(f())>>();
  auto future = result->get_future();
  boost::asio::post(io, [result, f = std::move(f)] { result->set_value(f()); });
  return future.get();
}

// What the store counted, read on its loop.
struct counts {
  std::uint64_t requests = 0;
  std::uint64_t received = 0;
  double process_cpu = 0;
  std::chrono::steady_clock::time_point at;
};

counts count_now(boost::asio::io_context& io, dtrun::rendezvous::dynamic_rendezvous& node0) {
  auto stats = stats_on_loop(io, node0);
  return {stats.requests, stats.bytes_received, process_cpu_s(), std::chrono::steady_clock::now()};
}

// Node 0's interval on its loop, waited for here up to `deadline`.
std::optional<node0_figures> node0_interval(boost::asio::io_context& io, node0_judge& judge,
                                            int interval, int nodes,
                                            std::chrono::seconds deadline) {
  auto result = std::make_shared<std::promise<node0_figures>>();
  auto future = result->get_future();
  boost::asio::post(io, [&judge, result, interval, nodes] {
    judge.run(interval, nodes, slow_node_of(nodes),
              [result](node0_figures f) { result->set_value(f); });
  });
  if (future.wait_for(deadline) != std::future_status::ready) return std::nullopt;
  return future.get();
}

// One census read alone: what node0_judge::run's fence adds to its counts.
counts census_cost(boost::asio::io_context& io, dtrun::rendezvous::dynamic_rendezvous& node0) {
  auto before = count_now(io, node0);
  auto answered = std::make_shared<std::promise<void>>();
  auto future = answered->get_future();
  boost::asio::post(io, [&node0, answered] {
    node0.census([answered](dtrun::rendezvous::rendezvous_handler::census_counts) {
      answered->set_value();
    });
  });
  future.get();
  auto after = count_now(io, node0);
  return {after.requests - before.requests, after.received - before.received, 0, after.at};
}

}  // namespace

dtrun::rendezvous::store_server_stats stats_on_loop(boost::asio::io_context& io,
                                                    dtrun::rendezvous::dynamic_rendezvous& node0) {
  return on_loop(io, [&node0] { return node0.store_stats(); });
}

int slow_node_of(int nodes) { return nodes > 1 ? nodes / 2 : -1; }

std::string work_document(int node, int interval, int slow_node) {
  // What summarize_steps makes of a rank's steps in production: nanosecond
  // own work, so the medians print with all their digits.
  const std::int64_t first = 21 + std::int64_t{interval} * steps_per_interval;
  std::vector<rank_work_sample> samples;
  for (int local = 0; local < ranks_per_node; ++local) {
    const int rank = node * ranks_per_node + local;
    std::mt19937_64 noise(static_cast<std::uint64_t>(rank) * 1000003u +
                          static_cast<std::uint64_t>(interval));
    std::uniform_real_distribution<double> spread(0.96, 1.04);
    const double slow = node == slow_node ? 1.5 : 1.0;
    std::vector<timed_step> steps;
    for (std::int64_t s = first; s < first + steps_per_interval; ++s) {
      steps.push_back({s, static_cast<std::int64_t>(1e8 * slow * spread(noise))});
    }
    if (auto sample = summarize_steps(rank, node, steps, first - 1)) samples.push_back(*sample);
  }
  return encode_work(fmt::format("gpu-{:05d}.cluster.internal", node), samples);
}

std::uint64_t reply_bytes(const std::vector<std::string>& values) {
  std::vector<std::string_view> views(values.begin(), values.end());
  std::string out;
  dtrun::rendezvous::wire::put_values_reply(out, views);
  return out.size();
}

void share_all(boost::asio::io_context& io, agents_t& agents, const std::vector<int>& group_ranks,
               int interval, int slow_node, std::chrono::seconds deadline,
               std::function<void(int answered, std::uint64_t read_bytes)> done) {
  struct tally {
    tally(boost::asio::io_context& io, std::function<void(int, std::uint64_t)> d)
        : done(std::move(d)), timer(io) {}
    int answered = 0;
    std::uint64_t read_bytes = 0;
    bool over = false;
    std::function<void(int, std::uint64_t)> done;
    boost::asio::steady_timer timer;
  };
  auto t = std::make_shared<tally>(io, std::move(done));
  const int total = static_cast<int>(agents.size());
  auto finish = [t] {
    if (t->over) return;
    t->over = true;
    t->timer.cancel();
    t->done(t->answered, t->read_bytes);
  };
  // share_work() does not answer on a store error: the deadline says so.
  t->timer.expires_after(deadline);
  t->timer.async_wait([finish](const boost::system::error_code& ec) {
    if (!ec) finish();
  });
  if (total == 0) return finish();
  for (std::size_t i = 0; i < agents.size(); ++i) {
    agents[i]->share_work(work_document(group_ranks[i], interval, slow_node), false,
                          [t, total, finish](std::vector<std::string>, std::string verdict,
                                             dtrun::rendezvous::preflight_room) {
                            t->read_bytes += reply_bytes({verdict});
                            if (++t->answered == total) finish();
                          });
  }
}

void node0_judge::run(int interval, int nodes, int slow_node,
                      std::function<void(node0_figures)> done) {
  auto f = std::make_shared<node0_figures>();
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_s();
  std::string document = work_document(0, interval, slow_node);
  f->document_bytes = document.size();
  node0_.share_work(std::move(document), true,
                    [this, f, start, cpu_start, nodes, done = std::move(done)](
                        std::vector<std::string> per_node, std::string verdict,
                        dtrun::rendezvous::preflight_room) {
    f->gather_wall_s = seconds_since(start);
    per_node.push_back(std::move(verdict));
    f->read_bytes = reply_bytes(per_node);
    per_node.pop_back();
    if (per_node.size() != static_cast<std::size_t>(nodes)) return;
    const auto judged = std::chrono::steady_clock::now();
    const double judge_cpu = thread_cpu_s();
    std::string published = judge(per_node, *f);
    f->judge_cpu_s = thread_cpu_s() - judge_cpu;
    f->judge_wall_s = seconds_since(judged);
    f->verdict_bytes = published.size();
    node0_.publish_stragglers(std::move(published));
    // The publish is a SET nobody waits for; the census read behind it on
    // the same connection answers once the store has it.
    node0_.census([f, cpu_start, done](dtrun::rendezvous::rendezvous_handler::census_counts) {
      f->loop_cpu_s = thread_cpu_s() - cpu_start;
      done(*f);
    });
  });
}

// straggler_watch::judge's steps (it is private to the watch): every
// node's figures decoded, the detector, the verdict encoded.
std::string node0_judge::judge(const std::vector<std::string>& per_node, node0_figures& f) {
  const double decode_start = thread_cpu_s();
  std::vector<rank_work_sample> samples;
  std::vector<std::string> hosts(per_node.size());
  for (std::size_t g = 0; g < per_node.size(); ++g) {
    if (per_node[g].empty()) continue;
    ++f.documents_read;
    std::string error;
    node_work work = decode_work(per_node[g], error);
    if (!error.empty()) continue;
    hosts[g] = work.host;
    for (rank_work_sample& sample : work.ranks) {
      sample.node_rank = static_cast<int>(g);
      samples.push_back(sample);
    }
  }
  f.decode_cpu_s = thread_cpu_s() - decode_start;
  detector_.observe(samples);
  std::vector<named_straggler> named;
  for (const straggler_finding& finding : detector_.current()) {
    named.push_back({finding, hosts[static_cast<std::size_t>(finding.node_rank)]});
  }
  f.named = named.size();
  return encode_stragglers(named);
}

int measure_intervals(boost::asio::io_context& io, dtrun::rendezvous::dynamic_rendezvous& node0,
                      int nodes, int intervals,
                      const std::function<std::pair<int, std::uint64_t>(int)>& others_share) {
  const auto deadline = std::chrono::seconds(120);
  const counts fence = census_cost(io, node0);
  node0_judge judge(node0);
  const double others = std::max(1, nodes - 1);
  int failed = 0;
  for (int k = 0; k < intervals; ++k) {
    const counts start = count_now(io, node0);
    auto [answered, others_read] = others_share(k);
    const counts shared = count_now(io, node0);
    auto f = node0_interval(io, judge, k, nodes, deadline);
    if (!f) {
      fmt::print(stderr, "rendezvous_scale: node 0's interval {} had no answer in {} s\n", k,
                 deadline.count());
      return 1;
    }
    const counts judged = count_now(io, node0);
    failed += nodes - 1 - answered;
    auto wall = [](const counts& a, const counts& b) {
      return std::chrono::duration<double>(b.at - a.at).count();
    };
    const auto node0_requests = judged.requests - shared.requests - fence.requests;
    fmt::print(
        "{{\"nodes\": {}, \"interval\": {}, \"answered\": {}, \"document_bytes\": {}, "
        "\"written_per_node\": {:.0f}, \"read_per_node\": {:.0f}, \"requests_per_node\": {:.2f}, "
        "\"others_wall_s\": {:.4f}, \"store_cpu_others_s\": {:.4f}, "
        "\"node0_written\": {}, \"node0_read\": {}, \"node0_requests\": {}, "
        "\"node0_documents\": {}, \"gather_wall_s\": {:.4f}, \"judge_wall_s\": {:.4f}, "
        "\"judge_cpu_s\": {:.4f}, \"decode_cpu_s\": {:.4f}, \"node0_wall_s\": {:.4f}, \"node0_loop_cpu_s\": {:.4f}, "
        "\"node0_process_cpu_s\": {:.4f}, \"verdict_bytes\": {}, \"named\": {}, "
        "\"store_requests\": {}}}\n",
        nodes, k + 1, answered + 1, f->document_bytes,
        static_cast<double>(shared.received - start.received) / others,
        static_cast<double>(others_read) / others,
        static_cast<double>(shared.requests - start.requests) / others, wall(start, shared),
        shared.process_cpu - start.process_cpu, judged.received - shared.received - fence.received,
        f->read_bytes, node0_requests, f->documents_read, f->gather_wall_s, f->judge_wall_s,
        f->judge_cpu_s, f->decode_cpu_s, wall(shared, judged), f->loop_cpu_s,
        judged.process_cpu - shared.process_cpu, f->verdict_bytes, f->named,
        shared.requests - start.requests + node0_requests);
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace scale_work
