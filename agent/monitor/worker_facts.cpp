#include "agent/monitor/worker_facts.h"

#include <algorithm>
#include <chrono>

#include "agent/output/output_tail.h"

namespace dtrun::agent {

namespace {

// Whether the agent sees local_rank's output (a pipe or a log file).
bool sees_output(const log_spec& logs, int local_rank) {
  auto routes = logs.routes(local_rank);
  auto seen = [](stream_route r) {
    return r != stream_route::console && r != stream_route::discard;
  };
  return seen(routes.out) || seen(routes.err);
}

// The worker's own word (dtrun.step, dtrun.section) over the job's file.
void add_page_facts(worker_status& fw, const progress_pages& pages, pid_t pid,
                    std::chrono::steady_clock::time_point now) {
  auto page = pages.read(fw.local_rank, pid);
  if (!page) return;
  if (page->step) fw.step = *page->step;
  if (auto name = page->current_name()) {
    fw.section = *name;
    auto since = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(page->current_since_ns));
    fw.section_seconds = std::max(0.0, std::chrono::duration<double>(now - since).count());
  }
}

}  // namespace

std::vector<worker_status> worker_facts(const std::vector<worker>& workers, bool stopping,
                                        const log_spec& logs, const progress_monitor* progress,
                                        const worker_output& output,
                                        const worker_progress_facts& steps) {
  std::vector<worker_status> facts;
  auto now = std::chrono::steady_clock::now();
  for (const auto& w : workers) {
    worker_status fw;
    fw.rank = w.rank;
    fw.local_rank = w.local_rank;
    fw.pid = w.pid;
    fw.state = w.reaped() ? "exited" : stopping ? "stopping" : "running";
    fw.exit_code = w.exit_code;
    fw.started_at = std::chrono::duration<double>(w.started_at.time_since_epoch()).count();
    if (sees_output(logs, w.local_rank)) {
      if (progress != nullptr) {
        if (auto last = progress->last_progress(w.local_rank)) {
          fw.seconds_since_output = std::chrono::duration<double>(now - *last).count();
        }
      }
      // Without --hang-timeout (no progress monitor), from the output
      // itself, as the docs promise under --tee and --redirects.
      if (!fw.seconds_since_output) {
        fw.seconds_since_output = output.seconds_since_output(w.local_rank);
      }
      if (auto line = output.last_line(w.local_rank)) fw.last_output = last_output_text(*line);
    }
    fw.step = steps.file_step;
    if (steps.pages != nullptr && !w.reaped()) add_page_facts(fw, *steps.pages, w.pid, now);
    facts.push_back(fw);
  }
  return facts;
}

}  // namespace dtrun::agent
