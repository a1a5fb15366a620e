// A machine kept out of the job (docs/agent.md, "Quarantine"): its record
// under machine/<key>, the job-wide list under quarantine/<i>, and waiting
// outside any round for a cooldown or the job's end (`ended`).
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"

namespace dtrun::rendezvous {

// Before this node's first round it has no connection yet; afterwards it
// keeps the last round's (the next round makes a fresh one).
void dynamic_rendezvous::impl::outside_connected(std::function<void(std::exception_ptr)> then) {
  if (ops_ && waits_) return then(nullptr);
  reconnect(std::move(then));
}

void dynamic_rendezvous::impl::read_machine(std::string machine_key, record_completion done) {
  auto self = shared_from_this();
  outside_connected([self, machine_key, done](std::exception_ptr error) {
    if (error) return done(error, {});
    self->ops_->read_now({self->keys_.machine(machine_key)}, [done](store_result r) {
      if (r.error) return done(r.error, {});
      done(nullptr, r.values.at(0));
    });
  });
}

// The record first, then its place in the list; then, in a round, the
// round ends as when a node leaves (no restart counted).
void dynamic_rendezvous::impl::quarantine(std::string machine_key, std::string record,
                                          round_record departure, std::function<void()> done) {
  auto self = shared_from_this();
  outside_connected([self, machine_key, record, departure, done](std::exception_ptr error) {
    if (error) {
      self->log(fmt::format("could not record this machine's quarantine in the store: {}",
                            error_message(error)));
      return done();
    }
    self->ops_->set(self->keys_.machine(machine_key), record,
                    self->unheeded_("record this machine's quarantine"));
    self->ops_->add(self->keys_.quarantine_count(), 1,
                    [self, record, departure, done](store_result n) {
      if (!n.error && n.number <= max_quarantine_entries) {
        self->ops_->set(self->keys_.quarantine_entry(n.number - 1), record,
                        self->unheeded_("add this machine to the quarantine list"));
      }
      self->leave_job(departure, done);
    });
  });
}

void dynamic_rendezvous::impl::quarantine_list(
    std::function<void(std::vector<std::string>)> done) {
  if (!ops_) return done({});
  auto self = shared_from_this();
  ops_->add(keys_.quarantine_count(), 0, [self, done](store_result n) {
    if (n.error || n.number <= 0) return done({});
    std::vector<std::string> keys;
    for (std::int64_t i = 0; i < std::min(n.number, max_quarantine_entries); ++i) {
      keys.push_back(self->keys_.quarantine_entry(i));
    }
    self->ops_->read_now(std::move(keys), [done](store_result r) {
      if (r.error) return done({});
      std::vector<std::string> records;
      for (auto& v : r.values) {
        if (!v.empty()) records.push_back(std::move(v));
      }
      done(std::move(records));
    });
  });
}

// `ended` is set when the job finishes, fails or is stopped; a store that
// goes away (the c10d host leaves when the job is over) ends it too.
void dynamic_rendezvous::impl::wait_outside(std::chrono::milliseconds timeout,
                                            std::function<void(bool, std::string)> done) {
  auto self = shared_from_this();
  outside_connected([self, timeout, done](std::exception_ptr error) {
    if (error) return done(true, self->lost_store_reason(error));
    self->waits_->wait({self->keys_.ended()}, bounded(timeout), [self, done](store_result w) {
      if (w.kind == store_error_kind::wait_timeout) return done(false, {});
      if (w.error) return done(true, self->lost_store_reason(w.error));
      self->ops_->read_now({self->keys_.ended()}, [done](store_result r) {
        std::string how = r.error || r.values.at(0).empty() ? "ended" : r.values.at(0);
        done(true, fmt::format("the job {}", how));
      });
    });
  });
}

}  // namespace dtrun::rendezvous
