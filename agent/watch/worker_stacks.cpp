#include "agent/watch/worker_stacks.h"

#include <filesystem>
#include <utility>

#include <fmt/format.h>

namespace dtrun::agent {
namespace fs = std::filesystem;

worker_stacks::worker_stacks(boost::asio::io_context& io, stack_capture_options options,
                             std::string run_dir, std::string hook_dir)
    : run_dir_(std::move(run_dir)), hook_dir_(std::move(hook_dir)) {
  capture_.emplace(io, std::move(options));
}

void worker_stacks::capture(const std::vector<worker>& workers, std::int64_t round,
                            done_handler done) {
  waiters_.push_back(std::move(done));
  if (!capture_ || capture_->busy()) return;
  ++captures_;
  std::vector<capture_target> targets;
  for (const auto& w : workers) {
    if (!w.alive()) continue;
    fs::path rank_dir = fs::path(w.error_file).parent_path();
    std::string python_stacks =
        hook_dir_.empty() ? std::string() : (rank_dir / "python_stacks.log").string();
    targets.push_back({w.local_rank, w.rank, w.pid, python_stacks, file(round, w.local_rank)});
  }
  capture_->capture(std::move(targets), [this](std::vector<captured_stack> stacks) {
    if (!stacks.empty()) written_ = true;  // the stacks-<n>.txt files dtrun names
    auto waiters = std::exchange(waiters_, {});
    for (auto& waiter : waiters) waiter(stacks);
  });
}

std::string worker_stacks::file(std::int64_t round, int local_rank) const {
  fs::path attempt = fs::path(run_dir_) / fmt::format("attempt_{}", round);
  std::string name = fmt::format("stacks-{}.txt", captures_);
  if (local_rank < 0) return (attempt / "<local_rank>" / name).string();
  return (attempt / std::to_string(local_rank) / name).string();
}

std::vector<pid_t> worker_stacks::helper_pids() const {
  return capture_ ? capture_->helper_pids() : std::vector<pid_t>{};
}

void worker_stacks::stop() {
  capture_.reset();
  waiters_.clear();
}

}  // namespace dtrun::agent
