#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/ssh/host_list.h"
#include "rendezvous/base/usage_error.h"
#include "tests/unit/launcher/usage_error_of.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;
using dtrun::launcher::testing::usage_error_of;

namespace {

struct flat {
  std::string target;
  int slots;  // 0: none given
  bool operator==(const flat&) const = default;
};

std::vector<flat> flatten(const std::vector<host_entry>& hosts) {
  std::vector<flat> out;
  for (const auto& h : hosts) out.push_back({h.target, h.slots.value_or(0)});
  return out;
}

}  // namespace

TEST_CASE("the hosts flag takes host:slots entries and Slurm ranges") {
  CHECK(flatten(parse_hosts_flag("a")) == std::vector<flat>{{"a", 0}});
  CHECK(flatten(parse_hosts_flag("a,b:4")) == std::vector<flat>{{"a", 0}, {"b", 4}});
  CHECK(flatten(parse_hosts_flag(" a , b:2 ")) == std::vector<flat>{{"a", 0}, {"b", 2}});
  CHECK(flatten(parse_hosts_flag("node[01-03]:2,x")) ==
        std::vector<flat>{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"x", 0}});
  CHECK(flatten(parse_hosts_flag("n[1,3]")) == std::vector<flat>{{"n1", 0}, {"n3", 0}});
  CHECK(flatten(parse_hosts_flag("root@10.77.0.1:1")) == std::vector<flat>{{"root@10.77.0.1", 1}});
  CHECK(flatten(parse_hosts_flag("me@n[1-2]")) == std::vector<flat>{{"me@n1", 0}, {"me@n2", 0}});
}

TEST_CASE("a host's address is the target without user@") {
  CHECK(host_entry{"me@node1", {}}.address() == "node1");
  CHECK(host_entry{"node1", {}}.address() == "node1");
}

TEST_CASE("bad --hosts values are one line naming --hosts") {
  CHECK(usage_error_of([] { parse_hosts_flag(""); }) ==
        "--hosts: the list is empty; give host[:slots],host[:slots],...");
  CHECK(usage_error_of([] { parse_hosts_flag("a,,b"); }) ==
        "--hosts: 'a,,b' has an empty entry; give host[:slots],...");
  CHECK(usage_error_of([] { parse_hosts_flag("a:0"); }) ==
        "--hosts 'a:0': slots: '0' is not a whole number from 1 to 4096");
  CHECK(usage_error_of([] { parse_hosts_flag("a:x"); }) ==
        "--hosts 'a:x': slots: 'x' is not a whole number from 1 to 4096");
  CHECK(usage_error_of([] { parse_hosts_flag("a,a:2"); }) ==
        "--hosts: host 'a' is listed twice; list each host once and give it slots for more "
        "workers");
  CHECK(usage_error_of([] { parse_hosts_flag("-oProxyCommand=x"); }).find("is not a host name") !=
        std::string::npos);
  CHECK(usage_error_of([] { parse_hosts_flag("a;reboot"); }).find("'a;reboot' is not a host name") !=
        std::string::npos);
  CHECK(usage_error_of([] { parse_hosts_flag("n[1-"); }).rfind("--hosts: Slurm host list", 0) == 0);
  // A comma inside an unclosed bracket: refused, not split into "n[1" and "2".
  CHECK(usage_error_of([] { parse_hosts_flag("n[1,2"); }) ==
        "--hosts: Slurm host list 'n[1,2': unbalanced brackets");
  for (const char* text : {"", "a,,b", "a:0", "n[1-", "a,a"}) {
    INFO(text);
    CHECK(usage_error_of([&] { parse_hosts_flag(text); }).find('\n') == std::string::npos);
  }
}

TEST_CASE("hostfiles: host slots=N per line, comments, blank lines, ranges") {
  std::string text =
      "# the cluster\n"
      "node1 slots=8\n"
      "\n"
      "  node2   slots=4   # a comment after\n"
      "node[3-4]\n"
      "node5 slots=2 max_slots=2\r\n";
  CHECK(flatten(parse_hostfile(text, "hf")) ==
        std::vector<flat>{{"node1", 8}, {"node2", 4}, {"node3", 0}, {"node4", 0}, {"node5", 2}});
}

TEST_CASE("bad hostfiles name the file and the line") {
  CHECK(usage_error_of([] { parse_hostfile("a slots=1\nb slots=x\n", "hf"); }) ==
        "hostfile hf line 2: slots: 'x' is not a whole number from 1 to 4096");
  CHECK(usage_error_of([] { parse_hostfile("a gpus=1\n", "hf"); }) ==
        "hostfile hf line 1: unknown key 'gpus'; only slots=N is understood");
  CHECK(usage_error_of([] { parse_hostfile("a 4\n", "hf"); }) ==
        "hostfile hf line 1: '4' is not key=value; write 'host slots=N'");
  CHECK(usage_error_of([] { parse_hostfile("# nothing\n\n", "hf"); }) ==
        "hostfile hf lists no hosts; write one 'host slots=N' per line");
  CHECK(usage_error_of([] { parse_hostfile("a\nb\na\n", "hf"); }) ==
        "hostfile hf line 3: host 'a' is listed twice; list each host once and give it slots "
        "for more workers");
}

TEST_CASE("read_hostfile reads the file and says when it cannot") {
  auto path = std::filesystem::temp_directory_path() / "dtrun_host_list_test_hostfile";
  {
    std::ofstream f(path);
    f << "h1 slots=2\nh2\n";
  }
  CHECK(flatten(read_hostfile(path.string())) == std::vector<flat>{{"h1", 2}, {"h2", 0}});
  std::filesystem::remove(path);
  CHECK(usage_error_of([&] { read_hostfile(path.string()); }) ==
        "--hostfile: cannot read '" + path.string() + "': No such file or directory");
}

TEST_CASE("a host list is bounded as a whole, not per line or per range") {
  // Three lines of a million each: refused on the line that passes the
  // bound, before the rest is expanded (each was allowed alone before).
  std::string text = "a[0-999999]\nb[0-999999]\nc[0-999999]\n";
  CHECK(usage_error_of([&] { parse_hostfile(text, "hf"); }) ==
        "hostfile hf line 1: more than 100000 hosts in all, the most --nnodes allows; list "
        "fewer hosts");
  CHECK(usage_error_of([] { parse_hostfile("a[1-60000]\nb[1-40001]\n", "hf"); }) ==
        "hostfile hf line 2: more than 100000 hosts in all, the most --nnodes allows; list "
        "fewer hosts");
  CHECK(parse_hostfile("a[1-60000]\nb[1-40000]\n", "hf").size() == max_hosts);
  // One more node than any agent's --nnodes accepts.
  CHECK(usage_error_of([] { parse_hosts_flag("node[0-100000]"); }) ==
        "--hosts: more than 100000 hosts in all, the most --nnodes allows; list fewer hosts");
  CHECK(parse_hosts_flag("node[1-100000]").size() == max_hosts);
  CHECK(usage_error_of([] { parse_hosts_flag("x,n[1-100000]"); }).find("more than 100000 hosts") !=
        std::string::npos);
  // A huge range costs nothing: refused before it is expanded.
  CHECK(usage_error_of([] { parse_hosts_flag("n[0-99999999999]"); }).find("more than 100000 hosts") !=
        std::string::npos);
}

TEST_CASE("a hostfile is bounded in bytes and lines") {
  std::string lines(max_hostfile_lines + 1, '\n');
  CHECK(usage_error_of([&] { parse_hostfile(lines, "hf"); }) ==
        "hostfile hf has more than 1000000 lines; is it a hostfile?");
  std::string big(max_hostfile_bytes + 1, '#');
  CHECK(usage_error_of([&] { parse_hostfile(big, "hf"); }) ==
        "hostfile hf is over 16 MiB; is it a hostfile?");
}

TEST_CASE("a key given twice on a hostfile line is refused") {
  CHECK(usage_error_of([] { parse_hostfile("a slots=2 slots=3\n", "hf"); }) ==
        "hostfile hf line 1: slots is given twice; give it once");
  CHECK(usage_error_of([] { parse_hostfile("a max_slots=2 max-slots=3\n", "hf"); }) ==
        "hostfile hf line 1: max-slots is given twice; give it once");
  CHECK(flatten(parse_hostfile("a slots=2 max_slots=3\n", "hf")) == std::vector<flat>{{"a", 2}});
}

TEST_CASE("a hostfile error shows control bytes escaped, not cut at a NUL") {
  using namespace std::string_literals;
  std::string error = usage_error_of([] { parse_hostfile("a\0b slots=1\n"s, "hf"); });
  CHECK(error == "hostfile hf line 1: 'a\\x00b' is not a host name (letters, digits, '-', '.', "
                 "'_', optionally user@)");
  CHECK(usage_error_of([] { parse_hostfile("a x\0y=1\n"s, "hf"); }) ==
        "hostfile hf line 1: unknown key 'x\\x00y'; only slots=N is understood");
  CHECK(usage_error_of([] { parse_hostfile("a \x1b[31m\n", "hf"); }) ==
        "hostfile hf line 1: '\\x1b[31m' is not key=value; write 'host slots=N'");
}

TEST_CASE("read_hostfile reads only regular files and never blocks on a FIFO") {
  auto dir = std::filesystem::temp_directory_path() /
             ("dtrun_host_list_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Without a writer, a blocking open() of the FIFO would never return.
  const std::string not_regular =
      "' is not a regular file (a FIFO, device or folder); give a file with one 'host slots=N' "
      "per line";
  CHECK(usage_error_of([&] { read_hostfile(fifo.string()); }) ==
        "--hostfile: '" + fifo.string() + not_regular);
  CHECK(usage_error_of([&] { read_hostfile(dir.string()); }) ==
        "--hostfile: '" + dir.string() + not_regular);
  CHECK(usage_error_of([] { read_hostfile("/dev/null"); }) == "--hostfile: '/dev/null" + not_regular);
  std::filesystem::remove_all(dir);
}

TEST_CASE("host names are bounded while a list is expanded, not after it") {
  // 100,000 names of 10,000 letters each were 1 GB before the check.
  // Built by appending: `std::string(n, c) + "..."` makes GCC 12 -O2 with
  // the precompiled headers report a false -Warray-bounds in libstdc++.
  std::string long_literal = "n[0-99999]";
  long_literal.append(300, 'a');
  CHECK(usage_error_of([&] { parse_hosts_flag(long_literal); })
            .find("it makes host names longer than 253 characters") != std::string::npos);
  // A range padded to 2,000 digits: refused before a value is written.
  std::string padded = "n[";
  padded.append(2000, '0');
  padded += "-99999]";
  CHECK(usage_error_of([&] { parse_hosts_flag(padded); })
            .find("it makes host names longer than 253 characters") != std::string::npos);
  // Bracket groups add up too.
  std::string groups = "n";
  for (int i = 0; i < 300; ++i) groups += "[0]";
  CHECK(usage_error_of([&] { parse_hosts_flag(groups); })
            .find("it makes host names longer than 253 characters") != std::string::npos);
  // 253 characters is a name; 254 is not.
  std::string longest(250, 'a');
  longest += "[1-2]";
  CHECK(parse_hosts_flag(longest).size() == 2);
  std::string too_long(253, 'a');
  too_long += "[1]";
  CHECK(usage_error_of([&] { parse_hosts_flag(too_long); }).find("longer than 253") !=
        std::string::npos);
}

TEST_CASE("a range ending at the largest number is one host, not a wrap to 0") {
  CHECK(flatten(parse_hosts_flag("n[18446744073709551615]")) ==
        std::vector<flat>{{"n18446744073709551615", 0}});
  CHECK(parse_hosts_flag("n[18446744073709551614-18446744073709551615]").size() == 2);
}

TEST_CASE("an error quotes at most 200 bytes of the user's line") {
  // A 1 MiB word of control bytes was echoed whole (4 MiB escaped).
  std::string line = "a ";
  line.append(1 << 20, '\x01');
  line += "\n";
  std::string error = usage_error_of([&] { parse_hostfile(line, "hf"); });
  CHECK(error.size() < 1200);
  CHECK(error.find("... (1048576 bytes)") != std::string::npos);
  std::string hosts(5000, 'x');
  hosts += "[";
  CHECK(usage_error_of([&] { parse_hosts_flag(hosts); }).size() < 1200);
}

TEST_CASE("user@host takes one '@': ssh and the rendezvous must read the same host") {
  CHECK(usage_error_of([] { parse_hosts_flag("a@b@c"); }) ==
        "--hosts: 'a@b@c' is not a host name (letters, digits, '-', '.', '_', optionally user@)");
  CHECK(parse_hosts_flag("me@node1").front().address() == "node1");
}
