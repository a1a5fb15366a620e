// One agent of the policy tests, with every seam faked: the workers
// (fake_process_runner), the rendezvous (scripted_rendezvous) and the
// machine (fake_agent_env); what it logs and writes to its event log is
// kept for the test to read.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "agent/policy/elastic_agent.h"
#include "tests/unit/agent/policy/fake_agent_env.h"
#include "tests/unit/agent/fake_process_runner.h"
#include "tests/unit/agent/scripted_rendezvous.h"

namespace dtrun::agent::testing {

struct agent_under_test {
  boost::asio::io_context io;
  fake_process_runner runner{io};
  scripted_rendezvous rdzv;
  fake_agent_env env;
  agent_options options;
  std::vector<std::string> lines;
  std::filesystem::path events;

  agent_under_test(int local_world_size, int max_restarts, const std::string& run_id)
      : rdzv(io, local_world_size), events(event_log_path(run_id)) {
    options.spec.local_world_size = local_world_size;
    options.spec.max_restarts = max_restarts;
    options.spec.run_id = run_id;
    options.program = "/opt/train";  // never executed
    options.control_socket = false;
    options.stop_timeout = std::chrono::milliseconds(30);
    options.log = [this](const std::string& line) { lines.push_back(line); };
    options.report.event_log = events.string();
    std::filesystem::remove(events);
  }
  ~agent_under_test() { std::filesystem::remove(events); }

  int run() {
    stack_capture_options stacks;
    stacks.native = false;  // eu-stack would be a process
    elastic_agent agent(io, options, rdzv, runner, stacks, nullptr, &env);
    return agent.run();
  }

  bool logged(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }

  std::vector<nlohmann::json> events_named(const std::string& name) const {
    std::vector<nlohmann::json> found;
    std::ifstream in(events);
    for (std::string line; std::getline(in, line);) {
      auto e = nlohmann::json::parse(line);
      if (e.at("event") == name) found.push_back(e);
    }
    return found;
  }

 private:
  // One file per test agent, even within one process.
  static std::filesystem::path event_log_path(const std::string& run_id) {
    static std::atomic<int> made{0};
    return std::filesystem::temp_directory_path() /
           (run_id + "-" + std::to_string(::getpid()) + "-" + std::to_string(made++) + ".jsonl");
  }
};

}  // namespace dtrun::agent::testing
