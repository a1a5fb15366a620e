#include "rendezvous/rendezvous_handler.h"

namespace dtrun::rendezvous {

// A single node is the whole job: its restarts are the job's, and nobody
// else needs the store when it is done. These complete inline.
void rendezvous_handler::report_failure(std::string reason, restart_completion done) {
  (void)reason;
  done(nullptr, ++local_restarts_);
}

void rendezvous_handler::fail_job(std::string reason, std::function<void()> done) {
  (void)reason;
  done();
}

void rendezvous_handler::finish(std::function<void(std::exception_ptr)> done) { done(nullptr); }

}  // namespace dtrun::rendezvous
