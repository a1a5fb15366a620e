// A fake /proc for the tests of what reads it (proc_stats, kill_watch):
// <root>/stat with btime, and a stat and statm file per process added.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace dtrun::agent::testing {

struct fake_proc {
  std::filesystem::path root;
  fake_proc() {
    char templ[] = "/tmp/dtrun_proc_XXXXXX";
    root = ::mkdtemp(templ);
    std::ofstream(root / "stat") << "cpu  1 2 3 4\nbtime 1700000000\nprocesses 5\n";
  }
  ~fake_proc() { std::filesystem::remove_all(root); }
  // utime/stime/start in ticks, rss in pages.
  void add(int pid, const std::string& comm, int pgrp, long utime, long stime, long start,
           long rss_pages, char state = 'S') {
    std::filesystem::create_directories(root / std::to_string(pid));
    std::ofstream(root / std::to_string(pid) / "stat")
        << pid << " (" << comm << ") " << state << " 1 " << pgrp
        << " 1 0 -1 4194560 100 0 0 0 " << utime << " " << stime
        << " 0 0 20 0 1 0 " << start << " 12345678 " << rss_pages << " 18446744073709551615\n";
    std::ofstream(root / std::to_string(pid) / "statm") << "1000 " << rss_pages << " 50 1 0 80 0\n";
  }
};

}  // namespace dtrun::agent::testing
