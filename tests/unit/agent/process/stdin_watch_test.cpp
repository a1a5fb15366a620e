#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/process/stdin_watch.h"

using namespace dtrun::agent;

TEST_CASE("stdin_watch: signal lines in order, junk reported, then end-of-file once") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  boost::asio::io_context io;
  std::vector<int> signals;
  std::vector<std::string> junk;
  int eofs = 0;
  stdin_watch::hooks hooks;
  hooks.on_signal = [&](int sig) { signals.push_back(sig); };
  hooks.on_junk = [&](const std::string& line) { junk.push_back(line); };
  hooks.on_eof = [&] { ++eofs; };
  stdin_watch watch(io, fds[0], hooks);
  // Split across writes: a line is only acted on once complete. All is
  // written before the loop runs, then the write end closes: the loop
  // ends when the EOF has been handled (no timers, no sleeps).
  std::string text = "SIGINT\nTE";
  REQUIRE(::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  text = "RM\r\nhello\n\nSIGUSR1\n" + std::string(100, 'x') + "\n";
  REQUIRE(::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  io.run();
  CHECK(signals == std::vector<int>{SIGINT, SIGTERM, SIGUSR1});
  REQUIRE(junk.size() == 2);
  CHECK(junk[0] == "hello");
  CHECK(eofs == 1);
}

TEST_CASE("stdin_watch: the writer's death is end-of-file even with nothing written") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  boost::asio::io_context io;
  int eofs = 0;
  stdin_watch watch(io, fds[0], {.on_signal = {}, .on_eof = [&] { ++eofs; }, .on_junk = {}});
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::raise(SIGKILL);  // holds the write end until it dies
  }
  ::close(fds[1]);
  io.run();
  CHECK(eofs == 1);
  int status = 0;
  ::waitpid(child, &status, 0);
}
