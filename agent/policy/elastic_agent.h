// The per-node agent: rendezvous, start the workers, supervise them on one
// event loop, stop and restart them, and turn what happened into an exit
// code. This class is the policy; the workers' processes are the
// worker_group's, through a process_runner (docs/design.md, "The agent").
//
// Everything happens on the io_context's one thread: the workers' ends
// (SIGCHLD, in the real runner) and the handled signals arrive through
// signal_sets, the stop grace period is a timer, and the rendezvous
// handler (with the store it may host) runs on the same loop. Nothing is
// polled.
//
// Exit code of run():
//   0        every worker of the last round exited 0
//   n        the first failing worker's exit code (128+s when killed by s)
//   126/127  the program could not be executed / was not found
//   128+s    the agent received signal s (forwarded to the workers)
//   75       this node's health check failed: it did not join, or it left
//            the job (docs/agent.md, "Node health")
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "agent/policy/agent_env.h"
#include "agent/spec/agent_options.h"
#include "agent/health/node_health.h"
#include "agent/process/process_runner.h"
#include "agent/watch/stack_capture.h"
#include "rendezvous/algorithm/rendezvous_handler.h"

namespace dtrun::agent {

class elastic_agent {
 public:
  // Workers are real processes (posix_process_runner).
  elastic_agent(boost::asio::io_context& io, agent_options options,
                rendezvous::rendezvous_handler& rendezvous);
  // Workers through `runner` (the unit tests' fake starts no process),
  // their stacks captured with `stacks`, the node's health checked by
  // `health` (null: the built-in checks and --node-health-check), the
  // machine asked through `env` (null: this machine, agent_env.h); each
  // must outlive the agent.
  elastic_agent(boost::asio::io_context& io, agent_options options,
                rendezvous::rendezvous_handler& rendezvous, process_runner& runner,
                stack_capture_options stacks = {}, node_health_checker* health = nullptr,
                agent_env* env = nullptr);
  ~elastic_agent();

  elastic_agent(const elastic_agent&) = delete;
  elastic_agent& operator=(const elastic_agent&) = delete;

  // Runs the job to its end on the io_context (calling io.run()) and
  // returns dtrun's exit code (see above).
  int run();

 private:
  class impl;
  std::unique_ptr<process_runner> own_runner_;  // the first constructor's
  std::unique_ptr<impl> impl_;
};

}  // namespace dtrun::agent
