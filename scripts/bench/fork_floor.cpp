// fork_floor: the floor under any launcher's start-up. Forks N children,
// each execs the same program, and waits for all of them; nothing else (no
// environment building, no store, no event loop). scripts/bench/launch
// times `fork_floor 4 /bin/true` next to `dtrun --no-python /bin/true`, and
// scripts/bench/realjob `fork_floor 4 python3 -c "import torch"`.
//
// Each child gets a session of its own, as dtrun's and torchrun's workers
// do: with the kernel's autogroup scheduling a session is a scheduling
// group, so on a loaded machine 4 children in one session would get a
// quarter of the CPU share 4 launched workers get (measured: 3x slower).
//
//   fork_floor N PROGRAM [ARGS...]   exit 0 when every child exited 0
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fork_floor N PROGRAM [ARGS...]\n");
    return 2;
  }
  const int count = std::atoi(argv[1]);
  if (count < 1) {
    std::fprintf(stderr, "fork_floor: N must be a positive number, got '%s'\n", argv[1]);
    return 2;
  }
  for (int i = 0; i < count; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork_floor: fork");
      return 1;
    }
    if (pid == 0) {
      setsid();
      execv(argv[2], argv + 2);
      std::perror("fork_floor: exec");
      _exit(127);
    }
  }
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
