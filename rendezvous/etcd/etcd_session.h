// An agent's lease in etcd: granted on first use, renewed every third of
// its TTL, shared by all of the agent's etcd clients. Keys put with it
// (the agent's last wills) vanish when the agent stops renewing it, which
// is how the other nodes learn that it died.
//
// When no member renews the lease for twice its TTL (the cluster lost its
// quorum, or every member is unreachable; an election alone never costs a
// lease, since a new leader extends the leases it inherits), or etcd says
// it expired, the lease counts as lost: every listener hears why once, and
// the next acquire() grants a new one.
//
// The job's lease: every key of a job (dtrun/<run_id>/..., its status
// keys) lives on one lease that all of the job's agents renew, recorded in
// dtrun/<run_id>/lease (itself on that lease). The first agent of a job
// grants it; later ones, a restarted one among them, adopt it. It ends
// lease_ttl after the last agent stopped renewing (the job finished, failed,
// was abandoned, or every agent was killed), and takes the job's keys with
// it: a rerun with the same id then starts afresh, while a live job (some
// agent still renewing) never loses a key. Agents never revoke it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/base/generation_timer.h"
#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_options.h"

namespace dtrun::rendezvous {

class etcd_session : public std::enable_shared_from_this<etcd_session> {
 public:
  etcd_session(boost::asio::io_context& io, etcd_options options,
               std::shared_ptr<boost::asio::ssl::context> tls);
  ~etcd_session();

  // Completes (from the loop) once a lease is held, or with an error line
  // when none could be granted before `deadline`.
  void acquire(std::chrono::steady_clock::time_point deadline,
               std::function<void(std::string error)> done);

  // The agent's lease's ID as etcd writes it (a decimal string); "" when
  // none. Its keys die with this agent: wills, ADD stamps.
  const std::string& lease() const { return lease_; }
  // The job's lease (above); "" when none. Every other key goes on it.
  const std::string& job_lease() const { return job_lease_; }

  // etcd refused a request on one of the leases ("requested lease not
  // found", `error`): a keep-alive of each tells which one expired, and the
  // leases count as lost with that lease's line, whichever request learnt
  // it first. `checked` runs (from the loop) once they are, or at once when
  // no lease is held.
  void lease_refused(const std::string& error, std::function<void()> checked);

  // Calls `lost` (once per lease) when the lease is lost. Returns an id
  // for forget().
  std::uint64_t listen(std::function<void(const std::string& why)> lost);
  void forget(std::uint64_t id);

  // Stops renewing; revokes the lease when the loop still runs.
  void close();

  const etcd_options& options() const { return options_; }
  const std::shared_ptr<boost::asio::ssl::context>& tls() const { return tls_; }

 private:
  void grant();
  void join_job();
  void adopt_or_create(std::string candidate);
  void granted(std::string error);
  void retry_later(std::function<void()> step);
  void give_up();
  std::string job_lease_key() const;
  void schedule_renewal();
  void renew();
  std::string agent_lease_lost() const;
  std::string job_lease_lost() const;
  void keep_alive(const std::string& id, std::string lost_message, std::function<void()> renewed,
                  std::function<void(const std::string&)> failed);
  void renewal_failed(const std::string& error);
  void lose(const std::string& why);
  void end_check();

  boost::asio::io_context& io_;
  etcd_options options_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::shared_ptr<etcd_connection> connection_;
  generation_timer timer_;  // the pause before a retry, then the next renewal
  std::string lease_, job_lease_;
  bool granting_ = false, closed_ = false, checking_ = false;
  std::chrono::steady_clock::time_point deadline_, last_renewed_;
  std::string last_error_;
  std::vector<std::function<void(std::string)>> waiting_;
  std::vector<std::function<void()>> checked_;  // lease_refused's callers
  std::map<std::uint64_t, std::function<void(const std::string&)>> listeners_;
  std::uint64_t next_listener_ = 0;
};

}  // namespace dtrun::rendezvous
