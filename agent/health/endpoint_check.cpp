#include "agent/health/endpoint_check.h"

#include <utility>

#include <fmt/format.h>

#include "agent/health/health_command.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;

health_finding endpoint_finding(const std::string& host, const std::string& error, bool gating) {
  health_finding finding;
  finding.check = "endpoint";
  finding.gating = gating;
  if (!error.empty()) {
    std::string shown = printable_excerpt(host, 200);
    finding.healthy = false;
    finding.reason = fmt::format("cannot resolve the rendezvous host {}: {}; check with: getent "
                                 "hosts {}",
                                 shown, error, shown);
  }
  return finding;
}

endpoint_check::endpoint_check(asio::io_context& io) : resolver_(io), timeout_(io) {}

endpoint_check::~endpoint_check() {
  cancel();
  ++*generation_;
}

void endpoint_check::run(const std::string& host, std::chrono::milliseconds timeout, bool gating,
                         std::function<void(health_finding)> done) {
  cancel();
  host_ = host;
  gating_ = gating;
  done_ = std::move(done);
  std::uint64_t run_generation = ++*generation_;
  timeout_.arm_after(timeout, [this, timeout] {
    finish("no answer within " + format_check_timeout(timeout));
  });
  // Any service: only the name is checked, not a port. Its handler runs on
  // the loop (posted by Asio's resolver thread), never from inside here.
  resolver_.async_resolve(
      host, "",
      [this, generation = generation_, run_generation](
          const boost::system::error_code& ec, const asio::ip::tcp::resolver::results_type& found) {
        if (*generation != run_generation) return;
        if (ec) {
          finish(ec.message());
        } else if (found.empty()) {
          finish("no address");
        } else {
          address_ = found.begin()->endpoint().address().to_string();
          finish("");
        }
      });
}

void endpoint_check::cancel() {
  if (!running()) return;
  ++*generation_;
  timeout_.cancel();
  resolver_.cancel();
  done_ = nullptr;
}

void endpoint_check::finish(const std::string& error) {
  ++*generation_;
  timeout_.cancel();
  resolver_.cancel();
  // Last: `done` may destroy this object.
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done(endpoint_finding(host_, error, gating_));
}

}  // namespace dtrun::agent
