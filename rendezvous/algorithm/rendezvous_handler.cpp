#include "rendezvous/algorithm/rendezvous_handler.h"

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

void rendezvous_handler::publish_failure(std::int64_t round, std::string record,
                                         std::function<void()> done) {
  local_failures_[round].push_back(std::move(record));
  done();
}

void rendezvous_handler::round_failures(std::int64_t round, failures_completion done) {
  auto it = local_failures_.find(round);
  std::vector<std::string> records;
  if (it != local_failures_.end()) records = it->second;
  std::size_t total = records.size();
  done(std::move(records), total);
}

void rendezvous_handler::share_progress(bool progressed,
                                        std::function<void(std::int64_t)> done) {
  if (progressed) ++local_progress_;
  done(local_progress_);
}

void rendezvous_handler::finish(std::function<void(std::exception_ptr)> done) { done(nullptr); }

}  // namespace dtrun::rendezvous
