#include <cstdint>
#include <string>

#include <catch2/catch.hpp>

#include "agent/health/disk_space_check.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;

TEST_CASE("free space reads in binary units", "[health]") {
  CHECK(format_free_bytes(512) == "512 B");
  CHECK(format_free_bytes(1536) == "1.5 KiB");
  CHECK(format_free_bytes(default_min_free_bytes) == "1 GiB");
  CHECK(format_free_bytes(std::uint64_t{3} << 40) == "3 TiB");
}

TEST_CASE("a folder with less free space than the minimum is unhealthy, named", "[health]") {
  testing::scoped_temp_dir dir("dtrun-disk");
  std::string folder = dir.path.string();
  health_finding enough = check_disk_space(folder, 1, true);
  CHECK(enough.check == "disk");
  CHECK(enough.healthy);
  CHECK(enough.gating);
  CHECK(enough.reason.empty());

  // More than any disk here has.
  health_finding short_of = check_disk_space(folder, std::uint64_t{1} << 60, false);
  CHECK_FALSE(short_of.healthy);
  CHECK_FALSE(short_of.gating);
  CHECK(short_of.reason.find("free under " + folder + " (the minimum is 1 EiB)") !=
        std::string::npos);
  CHECK(short_of.reason.find("check with: df -h " + folder) != std::string::npos);
}

TEST_CASE("the disk check's reason names what is free and what to run", "[health]") {
  health_finding f = disk_space_finding("/runs", std::uint64_t{512} << 20, "",
                                        default_min_free_bytes, true);
  CHECK_FALSE(f.healthy);
  CHECK(f.reason ==
        "only 512 MiB free under /runs (the minimum is 1 GiB); check with: df -h /runs");

  f = disk_space_finding("/my runs/it's", std::uint64_t{1} << 20, "", default_min_free_bytes,
                         true);
  CHECK(f.reason.find("check with: df -h '/my runs/it'\\''s'") != std::string::npos);

  f = disk_space_finding("/gone", std::nullopt, "No such file or directory",
                         default_min_free_bytes, true);
  CHECK(f.reason ==
        "cannot read the free space under /gone: No such file or directory; check with: df -h "
        "/gone");
  CHECK_FALSE(check_disk_space("/nonexistent/dtrun-disk-check").healthy);
}
