// The per-node agent: rendezvous, start the workers, supervise them on one
// event loop, stop and restart them, and turn what happened into an exit
// code.
//
// Everything happens on the io_context's one thread: SIGCHLD and the
// handled signals arrive through a signal_set, the stop grace period is a
// timer, and the rendezvous handler (with the store it may host) runs on
// the same loop. Nothing is polled.
//
// Exit code of run():
//   0        every worker of the last round exited 0
//   n        the first failing worker's exit code (128+s when killed by s)
//   126/127  the program could not be executed / was not found
//   128+s    the agent received signal s (forwarded to the workers)
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "agent/agent_options.h"
#include "rendezvous/algorithm/rendezvous_handler.h"

namespace dtrun::agent {

class elastic_agent {
 public:
  elastic_agent(boost::asio::io_context& io, agent_options options,
                rendezvous::rendezvous_handler& rendezvous);
  ~elastic_agent();

  elastic_agent(const elastic_agent&) = delete;
  elastic_agent& operator=(const elastic_agent&) = delete;

  // Runs the job to its end on the io_context (calling io.run()) and
  // returns dtrun's exit code (see above).
  int run();

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dtrun::agent
