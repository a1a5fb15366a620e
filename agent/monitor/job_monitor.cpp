#include "agent/monitor/job_monitor.h"

#include <unistd.h>

#include <chrono>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "agent/devices/gpu_stats.h"
#include "agent/monitor/job_census.h"
#include "agent/monitor/metrics_server.h"
#include "agent/process/proc_stats.h"
#include "agent/spec/wall_clock.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

}  // namespace

job_monitor::job_monitor(asio::io_context& io, options opts, hooks callbacks)
    : io_(io),
      options_(std::move(opts)),
      hooks_(std::move(callbacks)),
      started_at_(wall_clock_seconds()),
      publish_timer_(io) {
  auto log_or_nothing = [](const std::function<void(const std::string&)>& f) {
    return [f](const std::string& line) {
      if (f) f(line);
    };
  };
  if (options_.control_socket) {
    control_ = control_socket::open(
        io_,
        [this](const nlohmann::json& request, control_socket::respond_fn respond) {
          std::string op = request.value("op", "");
          if (op == "status") {
            respond(to_json(snapshot()));
          } else if (op == "stacks" && hooks_.stacks) {
            hooks_.stacks(std::move(respond));
          } else {
            respond({{"ok", false}, {"error", fmt::format("unknown op '{}'", op)}});
          }
        },
        log_or_nothing(hooks_.warn), log_or_nothing(hooks_.debug));
  }
  if (options_.metrics_port >= 0) {
    metrics_ = std::make_unique<metrics_server>(
        io_, options_.metrics_host, static_cast<std::uint16_t>(options_.metrics_port),
        [this] { return to_prometheus(snapshot()); },
        [this] { return to_json(snapshot()).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"; },
        log_or_nothing(hooks_.warn));
    if (hooks_.info) {
      std::string host = options_.metrics_host.find(':') != std::string::npos
                             ? "[" + options_.metrics_host + "]"
                             : options_.metrics_host;
      hooks_.info(fmt::format("metrics: http://{}:{}/metrics and /status", host, metrics_->port()));
    }
  }
}

job_monitor::~job_monitor() = default;

job_status job_monitor::snapshot() {
  job_status s = hooks_.facts ? hooks_.facts() : job_status{};
  s.agent_pid = ::getpid();
  s.started_at = started_at_;
  s.generated_at = wall_clock_seconds();
  s.spare_nodes = spare_nodes_;
  if (quarantines_seen_) {
    s.quarantined_nodes =
        static_cast<std::int64_t>(current_quarantines(quarantine_records_, s.generated_at).size());
  }

  // The agent's NVML session (agent_env.h), asked on the first look.
  if (!gpus_ && hooks_.nvml) gpus_ = std::make_unique<gpu_stats>(hooks_.nvml(), hooks_.debug);
  gpu_snapshot gpu;
  if (gpus_ && gpus_->available()) gpu = gpus_->sample();

  std::set<std::pair<pid_t, std::uint64_t>> seen;
  for (auto& ws : s.workers) {
    ws.node_rank = s.node_rank;
    if (ws.state != "exited") {
      if (auto group = sample_group(static_cast<pid_t>(ws.pid))) {
        ws.cpu_seconds = group->cpu_seconds;
        ws.rss_bytes = group->rss_bytes;
        // A meter per process (pid and start time: a reused pid is another).
        auto key = std::make_pair(static_cast<pid_t>(ws.pid), group->start_ticks);
        seen.insert(key);
        auto& meter = meters_[key];
        if (!meter) meter = std::make_unique<cpu_meter>();
        ws.cpu_percent = meter->update(group->cpu_seconds);
        if (auto used = gpu_stats::usage_of(gpu, group->members)) {
          ws.gpu_memory_bytes = used->memory_bytes;
          ws.gpu_utilization_percent = used->utilization_percent;
        }
      }
    }
  }
  // Meters of workers that are gone.
  for (auto it = meters_.begin(); it != meters_.end();) {
    it = seen.count(it->first) > 0 ? std::next(it) : meters_.erase(it);
  }
  return s;
}

void job_monitor::start_publishing() {
  if (hooks_.publish) publish_tick();  // re-arming cancels the last round's wait
}

void job_monitor::publish_tick() {
  hooks_.publish(to_json(snapshot()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  take_census();
  publish_timer_.expires_after(options_.publish_interval);
  publish_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the monitor is going away
    publish_tick();
  });
}

// One read per publish; the quarantine list (at most 64 records) only
// when a machine was added to it since the last read.
void job_monitor::take_census() {
  if (!hooks_.census) return;
  std::weak_ptr<job_monitor*> alive = self_;
  hooks_.census([alive](rendezvous::rendezvous_handler::census_counts c) {
    auto self = alive.lock();
    if (!self) return;
    job_monitor& m = **self;
    m.spare_nodes_ = spare_count(c.joined, c.members);
    m.quarantines_seen_ = c.quarantines;
    if (c.quarantines <= m.quarantines_read_ || m.listing_ || !m.hooks_.quarantine_list) return;
    m.listing_ = true;
    m.hooks_.quarantine_list([alive, count = c.quarantines](std::vector<std::string> records) {
      auto still = alive.lock();
      if (!still) return;
      job_monitor& monitor = **still;
      monitor.listing_ = false;
      monitor.quarantine_records_ = parse_records(records);
      // An empty list with a count is a failed read: asked again next time.
      if (!records.empty()) monitor.quarantines_read_ = count;
    });
  });
}

}  // namespace dtrun::agent
