// The agent's window to the outside while its job runs: the control socket
// that `dtrun status` and `dtrun stacks` ask, the --metrics-port HTTP
// server, and (several nodes) the status each node publishes in the store
// for `dtrun status --rdzv-endpoint`. The agent fills a job_status with
// what it knows (the one status schema, job_status.h); the monitor adds
// what it measures (/proc and NVML, when asked); it decides nothing about
// the job.
//
// Single-threaded on the agent's io_context. Sampling costs about 1 ms per
// worker (a /proc scan for its process group; docs/observability.md).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/health/quarantine_record.h"
#include "agent/monitor/control_socket.h"
#include "agent/monitor/job_status.h"
#include "rendezvous/algorithm/rendezvous_handler.h"

namespace dtrun::agent {

class gpu_stats;
class nvml_session;
class metrics_server;
class cpu_meter;

class job_monitor {
 public:
  struct options {
    int metrics_port = -1;  // -1: no metrics server
    std::string metrics_host = "127.0.0.1";
    bool control_socket = true;
    // How often a node of a multi-node job publishes its status.
    std::chrono::milliseconds publish_interval = std::chrono::seconds(5);
  };
  struct hooks {
    // What the agent knows: the job, its rounds, each worker's state and
    // output (the rest of the job_status is the monitor's to measure).
    std::function<job_status()> facts;
    // `dtrun stacks`: capture every worker's stacks, then respond.
    std::function<void(control_socket::respond_fn)> stacks;
    // Stores this node's status JSON for the other nodes' `dtrun status`
    // (empty: a single node, nothing to publish).
    std::function<void(std::string)> publish;
    // The job's spares and quarantines for /metrics, asked at each publish
    // (rendezvous_handler::census and quarantine_list; empty: unknown).
    std::function<void(std::function<void(rendezvous::rendezvous_handler::census_counts)>)>
        census;
    std::function<void(std::function<void(std::vector<std::string>)>)> quarantine_list;
    // The agent's NVML session, for the workers' GPU figures.
    std::function<nvml_session&()> nvml;
    std::function<void(const std::string&)> info;
    std::function<void(const std::string&)> warn;
    std::function<void(const std::string&)> debug;
  };

  // Opens the control socket (a failure is one warning; the job runs on)
  // and the metrics server (a failure throws std::runtime_error with one
  // line naming --metrics-port: the user asked for it).
  job_monitor(boost::asio::io_context& io, options opts, hooks callbacks);
  ~job_monitor();

  job_monitor(const job_monitor&) = delete;
  job_monitor& operator=(const job_monitor&) = delete;

  // The facts with each worker's CPU, memory and GPU figures.
  job_status snapshot();

  // Publishes now and then every publish_interval (several nodes only).
  void start_publishing();

 private:
  void publish_tick();
  void take_census();

  // What the last census found: spares, and the job's quarantine list
  // (read again only when its count grows: its records never change).
  std::optional<std::int64_t> spare_nodes_;
  std::optional<std::int64_t> quarantines_seen_;
  std::int64_t quarantines_read_ = 0;
  bool listing_ = false;
  std::vector<quarantine_record> quarantine_records_;
  // Census replies come back on the loop, maybe after the monitor is gone.
  std::shared_ptr<job_monitor*> self_ = std::make_shared<job_monitor*>(this);

  boost::asio::io_context& io_;
  options options_;
  hooks hooks_;
  double started_at_;
  std::unique_ptr<gpu_stats> gpus_;
  std::map<std::pair<pid_t, std::uint64_t>, std::unique_ptr<cpu_meter>> meters_;
  std::unique_ptr<control_socket> control_;
  std::unique_ptr<metrics_server> metrics_;
  boost::asio::steady_timer publish_timer_;
};

}  // namespace dtrun::agent
