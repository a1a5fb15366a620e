// Real pipes, files and children: the plumbing is about file descriptors,
// so fakes would prove nothing. The "console" is a pipe the test reads.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/output/console_sink.h"
#include "agent/output/worker_output.h"
#include "agent/process/worker_process.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace std::string_literals;

namespace {

// A pipe standing in for the agent's stdout or stderr.
struct fake_console {
  int read_fd = -1;
  int write_fd = -1;
  fake_console() {
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    read_fd = ends[0];
    write_fd = ends[1];
  }
  ~fake_console() {
    ::close(read_fd);
    if (write_fd >= 0) ::close(write_fd);
  }
  // Everything written so far (the writers are done).
  std::string drain() {
    ::fcntl(read_fd, F_SETFL, O_NONBLOCK);
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(read_fd, buf, sizeof buf)) > 0) all.append(buf, static_cast<std::size_t>(n));
    return all;
  }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t spawn_sh(const std::string& script, child_stdio stdio) {
  spawn_request request{"/bin/sh", {"-c", script}, {{"PATH", "/bin:/usr/bin"}}};
  request.stdout_fd = stdio.out;
  request.stderr_fd = stdio.err;
  spawn_result spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  return spawned.pid;
}

int wait_code(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("tee'd streams reach their files unchanged and the console as prefixed lines") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  fake_console out;
  fake_console err;
  asio::io_context io;
  log_spec spec;
  spec.tee.all = std_all;
  worker_output output(io, spec, nullptr, std::chrono::seconds(30), out.write_fd, err.write_fd);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    fs::path rank_dir = dir.path / std::to_string(rank);
    fs::create_directories(rank_dir);
    child_stdio stdio = output.prepare(rank, rank_dir.string(), "[r" + std::to_string(rank) + "]:");
    pids[rank] = spawn_sh("printf 'a\\r\\nb\\0\\377\\nno newline'; printf 'e\\n' >&2", stdio);
    output.spawned(rank);
  }
  int drained = 0;
  for (int rank = 0; rank < 2; ++rank) output.when_drained(rank, [&] { ++drained; });
  io.run();
  CHECK(drained == 2);
  for (pid_t pid : pids) CHECK(wait_code(pid) == 0);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(read_file(dir.path / std::to_string(rank) / "stdout.log") == "a\r\nb\0\377\nno newline"s);
    CHECK(read_file(dir.path / std::to_string(rank) / "stderr.log") == "e\n");
  }
  // Each rank's lines in order, whole; the two ranks' lines may alternate.
  std::vector<std::string> lines[2];
  std::istringstream console(out.drain());
  for (std::string line; std::getline(console, line);) {
    REQUIRE(line.size() > 5);
    int rank = line.substr(0, 5) == "[r0]:" ? 0 : line.substr(0, 5) == "[r1]:" ? 1 : -1;
    REQUIRE(rank >= 0);
    lines[rank].push_back(line.substr(5));
  }
  for (const auto& rank_lines : lines) {
    CHECK(rank_lines == std::vector<std::string>{"a\r", "b\0\377"s, "no newline"});
  }
  std::string errors = err.drain();
  CHECK((errors == "[r0]:e\n[r1]:e\n" || errors == "[r1]:e\n[r0]:e\n"));
}

TEST_CASE("redirected and discarded streams are the worker's own fds: no pipe to drain") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  asio::io_context io;
  log_spec spec;
  spec.redirects.all = std_out;
  spec.local_ranks_filter = std::set<int>{1};
  worker_output output(io, spec, nullptr);
  child_stdio stdio = output.prepare(0, dir.path.string(), "[x]:");
  CHECK(stdio.out >= 3);
  CHECK(stdio.err >= 3);  // /dev/null: rank 0 is filtered out
  pid_t pid = spawn_sh("echo to-file; echo nowhere >&2", stdio);
  output.spawned(0);
  bool drained = false;
  output.when_drained(0, [&] { drained = true; });
  CHECK(drained);  // at once
  CHECK(wait_code(pid) == 0);
  CHECK(read_file(dir.path / "stdout.log") == "to-file\n");
  CHECK_FALSE(fs::exists(dir.path / "stderr.log"));
  // Not in the data path, the agent reads the end of the file it wrote,
  // and its age from the file's time.
  CHECK(output.last_line(0) == "to-file");
  auto since = output.seconds_since_output(0);
  REQUIRE(since);
  CHECK(*since >= 0.0);
}

TEST_CASE("a worker's last line is what it wrote last, a '\\r' redraw included") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  fake_console out;
  asio::io_context io;
  log_spec spec;
  spec.tee.all = std_out;  // stderr stays on the console: not seen
  worker_output output(io, spec, nullptr, std::chrono::seconds(30), out.write_fd, out.write_fd);
  child_stdio stdio = output.prepare(0, dir.path.string(), "[r0]:");
  CHECK(output.last_line(0) == std::nullopt);  // nothing written yet
  CHECK(output.seconds_since_output(0) == std::nullopt);
  pid_t pid = spawn_sh("printf 'loading\\nstep 2/10\\rstep 3/10\\r'", stdio);
  output.spawned(0);
  output.when_drained(0, [] {});
  io.run();
  CHECK(wait_code(pid) == 0);
  CHECK(output.last_line(0) == "step 3/10");
  CHECK(output.last_line(1) == std::nullopt);  // no such worker
  // Without --hang-timeout this is where SINCE OUTPUT comes from.
  auto since = output.seconds_since_output(0);
  REQUIRE(since);
  CHECK(*since >= 0.0);
  CHECK(output.seconds_since_output(1) == std::nullopt);
  output.end_round();
  CHECK(output.last_line(0) == std::nullopt);
  CHECK(output.seconds_since_output(0) == std::nullopt);
}

TEST_CASE("a grandchild holding the pipe delays the drain by the grace period only") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  fake_console out;
  asio::io_context io;
  log_spec spec;
  spec.tee.all = std_out;
  worker_output output(io, spec, nullptr, std::chrono::milliseconds(50), out.write_fd, 2);
  child_stdio stdio = output.prepare(0, dir.path.string(), "[0]:");
  pid_t pid = spawn_sh("echo before; sleep 1000 & echo after", stdio);
  output.spawned(0);
  CHECK(wait_code(pid) == 0);
  bool drained = false;
  output.when_drained(0, [&] {
    drained = true;
    output.end_round();
  });
  io.run();
  ::kill(-pid, SIGKILL);
  CHECK(drained);
  CHECK(out.drain() == "[0]:before\n[0]:after\n");
}

TEST_CASE("a stalled console does not block the loop, and gets every byte once it reads") {
  fake_console console;
  asio::io_context io;
  console_sink sink(io, console.write_fd);
  REQUIRE(sink.is_async());
  std::string big(1 << 20, 'x');  // far more than a pipe holds
  bool written = false;
  sink.write(big, [&] { written = true; });
  // The loop still runs other work while the write waits for the reader.
  bool timer_ran = false;
  asio::steady_timer timer(io, std::chrono::milliseconds(1));
  asio::posix::stream_descriptor reader(io, ::dup(console.read_fd));
  std::string got(big.size(), '\0');
  timer.async_wait([&](const boost::system::error_code&) {
    timer_ran = true;
    CHECK_FALSE(written);
    asio::async_read(reader, asio::buffer(got), [](const boost::system::error_code&, std::size_t) {});
  });
  io.run();
  CHECK(timer_ran);
  CHECK(written);
  CHECK(got == big);
}

TEST_CASE("writes to a console whose reader is gone are dropped, not fatal") {
  fake_console console;
  ::close(console.read_fd);
  console.read_fd = ::open("/dev/null", O_RDONLY);
  asio::io_context io;
  ::signal(SIGPIPE, SIG_IGN);
  console_sink sink(io, console.write_fd);
  int done = 0;
  sink.write("lost\n", [&] { ++done; });
  sink.write("lost too\n", [&] { ++done; });
  io.run();
  CHECK(done == 2);
}

TEST_CASE("tee'd lines matching the duplicate filters also go to the attempt's filtered file") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  fake_console out;
  fake_console err;
  asio::io_context io;
  log_spec spec;
  spec.tee.is_map = true;
  spec.tee.per_rank = {{0, std_all}};  // rank 1 is only redirected: never copied
  spec.redirects.all = std_all;
  spec.duplicate_stdout_filters = {"loss", "a,b"};
  spec.duplicate_stderr_filters = {"Error"};
  worker_output output(io, spec, nullptr, std::chrono::seconds(30), out.write_fd, err.write_fd);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    fs::path rank_dir = dir.path / "attempt_0" / std::to_string(rank);
    fs::create_directories(rank_dir);
    child_stdio stdio = output.prepare(rank, rank_dir.string(), "[r" + std::to_string(rank) + "]:");
    pids[rank] = spawn_sh(
        "printf 'loss 1\\nstep\\nlo'; printf 'ss 2\\na,b\\n'; printf 'Error x\\nok\\n' >&2; "
        "printf 'last loss'",
        stdio);
    output.spawned(rank);
  }
  int drained = 0;
  for (int rank = 0; rank < 2; ++rank) output.when_drained(rank, [&] { ++drained; });
  io.run();
  CHECK(drained == 2);
  for (pid_t pid : pids) CHECK(wait_code(pid) == 0);
  CHECK(read_file(dir.path / "attempt_0" / "filtered_stdout.log") ==
        "[r0]:loss 1\n[r0]:loss 2\n[r0]:a,b\n[r0]:last loss\n");
  CHECK(read_file(dir.path / "attempt_0" / "filtered_stderr.log") == "[r0]:Error x\n");
  // The console and the rank's own files are unchanged by the copy.
  CHECK(out.drain() == "[r0]:loss 1\n[r0]:step\n[r0]:loss 2\n[r0]:a,b\n[r0]:last loss\n");
  CHECK(read_file(dir.path / "attempt_0" / "1" / "stdout.log") ==
        "loss 1\nstep\nloss 2\na,b\nlast loss");
}

TEST_CASE("the filtered file exists and is empty when no line matches") {
  testing::scoped_temp_dir dir{"dtrun-output"};
  fake_console out;
  fake_console err;
  asio::io_context io;
  log_spec spec;
  spec.duplicate_stdout_filters = {"never"};
  worker_output output(io, spec, nullptr, std::chrono::seconds(30), out.write_fd, err.write_fd);
  fs::path rank_dir = dir.path / "attempt_3" / "0";
  fs::create_directories(rank_dir);
  output.prepare(0, rank_dir.string(), "[r0]:");
  output.spawned(0);
  CHECK(fs::exists(dir.path / "attempt_3" / "filtered_stdout.log"));
  CHECK(fs::file_size(dir.path / "attempt_3" / "filtered_stdout.log") == 0);
  CHECK_FALSE(fs::exists(dir.path / "attempt_3" / "filtered_stderr.log"));
  output.end_round();
}
