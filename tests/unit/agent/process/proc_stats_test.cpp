#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "agent/process/proc_stats.h"
#include "tests/unit/agent/fake_proc.h"

using namespace dtrun::agent;
using dtrun::agent::testing::fake_proc;
namespace fs = std::filesystem;

namespace {

const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

}  // namespace

TEST_CASE("a process's stat is parsed after the last parenthesis") {
  fake_proc proc;
  proc.add(77, "py) S 1 2 (x", 77, 250, 50, 1000, 10, 'R');
  auto s = sample_process(77, proc.root.string());
  REQUIRE(s);
  CHECK(s->pid == 77);
  CHECK(s->pgid == 77);
  CHECK(s->state == 'R');
  CHECK(s->cpu_seconds == Approx(300 / ticks));
  CHECK(s->rss_bytes == 10 * page);
  CHECK(s->start_ticks == 1000);
  CHECK(s->started_at == Approx(1700000000 + 1000 / ticks));
}

TEST_CASE("a missing or truncated process reads as gone") {
  fake_proc proc;
  CHECK(!sample_process(5, proc.root.string()));
  fs::create_directories(proc.root / "6");
  std::ofstream(proc.root / "6" / "stat") << "6 (x) S 1 6";
  CHECK(!sample_process(6, proc.root.string()));
  CHECK(!sample_process(0, proc.root.string()));
  CHECK(!sample_process(-1, proc.root.string()));
}

TEST_CASE("a process group is summed over every member, the leader first") {
  fake_proc proc;
  proc.add(50, "python", 50, 100, 0, 10, 100);
  proc.add(51, "pt_data_worker", 50, 30, 20, 11, 5);
  proc.add(52, "other", 52, 1000, 0, 12, 7);
  proc.add(49, "pt_data_worker", 50, 10, 0, 13, 1);
  auto g = sample_group(50, proc.root.string());
  REQUIRE(g);
  CHECK(g->pid == 50);
  CHECK(g->members.front() == 50);
  CHECK(g->members.size() == 3);
  CHECK(g->cpu_seconds == Approx(160 / ticks));
  CHECK(g->rss_bytes == 106 * page);
  CHECK(!sample_group(60, proc.root.string()));
}

TEST_CASE("our own process reads as getrusage and /proc/self/status say") {
  // Burn some CPU so the figures are not all zero.
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  auto s = sample_process(::getpid());
  REQUIRE(s);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  double rusage_cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  // Ticks are coarser than getrusage's microseconds.
  CHECK(s->cpu_seconds == Approx(rusage_cpu).margin(3.0 / ticks + 0.02));
  std::ifstream status("/proc/self/status");
  std::string line;
  std::uint64_t vmrss_kb = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) vmrss_kb = std::stoull(line.substr(6));
  }
  CHECK(static_cast<double>(s->rss_bytes) == Approx(static_cast<double>(vmrss_kb * 1024)).epsilon(0.05));
  CHECK(s->state == 'R');
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(s->started_at <= now + 1);
  CHECK(s->started_at > now - 3600);
  CHECK(s->pgid == ::getpgrp());
}

TEST_CASE("the CPU meter reports percent of one core over wall time") {
  cpu_meter m;
  auto t0 = cpu_meter::clock::time_point{} + std::chrono::seconds(100);
  CHECK(!m.update(1.0, t0));
  auto p = m.update(2.5, t0 + std::chrono::seconds(1));
  REQUIRE(p);
  CHECK(*p == Approx(150.0));
  CHECK(!m.update(2.0, t0 + std::chrono::seconds(2)));  // went down: starts over
  CHECK(!m.update(2.0, t0 + std::chrono::seconds(2)));  // no time passed
  CHECK(m.update(2.0, t0 + std::chrono::seconds(4)) == std::optional<double>(0.0));
}

TEST_CASE("sampling cost per worker", "[.][bench]") {
  auto start = std::chrono::steady_clock::now();
  int n = 2000;
  for (int i = 0; i < n; ++i) REQUIRE(sample_process(::getpid()));
  auto mid = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) REQUIRE(sample_group(::getpgrp()));
  auto end = std::chrono::steady_clock::now();
  using micros = std::chrono::duration<double, std::micro>;
  double one = micros(mid - start).count() / n;
  double group = micros(end - mid).count() / 200;
  WARN("sample_process: " << one << " us; sample_group (scans /proc): " << group << " us");
}
