#include "agent/process/proc_stats.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string_view>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {

namespace {

// /proc files are small; one read, bounded.
std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  auto value = parse_whole<std::uint64_t>(s);
  if (value) out = *value;
  return value.has_value();
}

// Whitespace-separated fields of `s`.
std::vector<std::string_view> fields_of(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\n' && s[i] != '\t') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// Boot time from the "btime" line of <proc_root>/stat.
std::optional<std::uint64_t> boot_time(const std::string& proc_root) {
  std::ifstream in(proc_root + "/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) {
      std::uint64_t v = 0;
      if (parse_u64(std::string_view(line).substr(6), v)) return v;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// `only_group`: stop after stat (no statm read) when the process is in
// another group; a scan of /proc then costs one read per process.
std::optional<proc_sample> sample_with_boot(pid_t pid, const std::string& proc_root,
                                            std::optional<std::uint64_t> btime,
                                            pid_t only_group = 0) {
  if (pid <= 0) return std::nullopt;
  std::string dir = proc_root + "/" + std::to_string(pid);
  auto stat = read_small_file(dir + "/stat");
  if (!stat) return std::nullopt;
  // "pid (comm) S ppid pgrp ...": comm may hold anything but is the only
  // field in parentheses, so the fields start after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  auto f = fields_of(std::string_view(*stat).substr(close + 1));
  // f[0] is field 3 (state); utime 14, stime 15, starttime 22.
  if (f.size() < 20 || f[0].size() != 1) return std::nullopt;
  std::uint64_t pgrp = 0, utime = 0, stime = 0, start = 0;
  if (!parse_u64(f[2], pgrp) || !parse_u64(f[11], utime) || !parse_u64(f[12], stime) ||
      !parse_u64(f[19], start)) {
    return std::nullopt;
  }
  if (only_group != 0 && static_cast<pid_t>(pgrp) != only_group) return std::nullopt;
  auto statm = read_small_file(dir + "/statm");
  if (!statm) return std::nullopt;
  auto m = fields_of(*statm);
  std::uint64_t resident_pages = 0;
  if (m.size() < 2 || !parse_u64(m[1], resident_pages)) return std::nullopt;

  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc_sample s;
  s.pid = pid;
  s.pgid = static_cast<pid_t>(pgrp);
  s.state = f[0][0];
  s.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  s.rss_bytes = resident_pages * page;
  s.start_ticks = start;
  if (btime) s.started_at = static_cast<double>(*btime) + static_cast<double>(start) / ticks;
  return s;
}

}  // namespace

std::optional<proc_sample> sample_process(pid_t pid, const std::string& proc_root) {
  return sample_with_boot(pid, proc_root, boot_time(proc_root));
}

std::optional<proc_sample> sample_group(pid_t pgid, const std::string& proc_root) {
  if (pgid <= 0) return std::nullopt;
  auto btime = boot_time(proc_root);
  std::optional<proc_sample> total;
  auto add = [&](const proc_sample& p) {
    if (!total) {
      total = p;
      total->members = {p.pid};
      return;
    }
    total->cpu_seconds += p.cpu_seconds;
    total->rss_bytes += p.rss_bytes;
    total->members.push_back(p.pid);
  };
  // The leader first, so pid, state and start time are its own.
  if (auto leader = sample_with_boot(pgid, proc_root, btime); leader && leader->pgid == pgid) {
    add(*leader);
  }
  DIR* dir = ::opendir(proc_root.c_str());
  if (!dir) return total;
  while (dirent* e = ::readdir(dir)) {
    std::uint64_t pid = 0;
    std::string_view name(e->d_name);
    if (!parse_u64(name, pid) || pid == static_cast<std::uint64_t>(pgid) || pid > 0x7fffffff) continue;
    auto p = sample_with_boot(static_cast<pid_t>(pid), proc_root, btime, pgid);
    if (p && p->pgid == pgid) add(*p);
  }
  ::closedir(dir);
  return total;
}

std::optional<double> cpu_meter::update(double cpu_seconds, clock::time_point now) {
  std::optional<double> percent;
  if (last_cpu_ && now > last_time_ && cpu_seconds >= *last_cpu_) {
    double wall = std::chrono::duration<double>(now - last_time_).count();
    percent = (cpu_seconds - *last_cpu_) / wall * 100.0;
  }
  last_cpu_ = cpu_seconds;
  last_time_ = now;
  return percent;
}

}  // namespace dtrun::agent
