#include <signal.h>

#include <catch2/catch.hpp>

#include "agent/spec/failure_class.h"

using namespace dtrun::agent;

namespace {

failure_evidence exited(int code) {
  failure_evidence e;
  e.exit_code = code;
  return e;
}

failure_evidence killed(int sig) {
  failure_evidence e;
  e.signal = sig;
  e.exit_code = 128 + sig;
  return e;
}

}  // namespace

TEST_CASE("a worker's failure is classified by what its node can prove", "[failure_class]") {
  CHECK(classify(exited(3)) == failure_class::exit);

  auto with_file = exited(1);
  with_file.message = "TypeError: unsupported operand";
  CHECK(classify(with_file) == failure_class::exception);

  auto with_traceback = exited(1);
  with_traceback.log_tail = {"Traceback (most recent call last):", "  File \"t.py\", line 3",
                             "ValueError: bad"};
  CHECK(classify(with_traceback) == failure_class::exception);

  CHECK(classify(killed(SIGSEGV)) == failure_class::signal);
  // A SIGKILL is an OOM kill only when the kernel's count says so.
  CHECK(classify(killed(SIGKILL)) == failure_class::signal);
  auto oom = killed(SIGKILL);
  oom.oom_killed = true;
  CHECK(classify(oom) == failure_class::oom_kill);
  // A CUDA out-of-memory error is the program's exception.
  auto cuda_oom = exited(1);
  cuda_oom.message = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
  CHECK(classify(cuda_oom) == failure_class::exception);

  auto hang = killed(SIGKILL);
  hang.oom_killed = true;  // dtrun's own kill wins: it knows why it sent it
  hang.hang = "no progress from any worker for 5.0 s";
  CHECK(classify(hang) == failure_class::hang);
  auto watchdog = killed(SIGKILL);
  watchdog.watchdog = "deadline of scope s passed 1.0 s ago; SIGKILL sent";
  CHECK(classify(watchdog) == failure_class::watchdog);
}

TEST_CASE("a collective's timeout is told from the worker's own words", "[failure_class]") {
  auto gloo = exited(1);
  gloo.message =
      "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
      "waiting 5000ms for recv operation to complete";
  CHECK(classify(gloo) == failure_class::collective_timeout);
  CHECK(exception_type(gloo) == "RuntimeError");

  auto nccl = killed(SIGABRT);
  nccl.log_tail = {"[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
                   "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
                   "terminate called after throwing an instance of 'c10::DistBackendError'"};
  CHECK(classify(nccl) == failure_class::collective_timeout);

  // A peer that died is not a timeout: that rank is a victim of another's
  // failure, which the other's class says.
  auto peer = exited(1);
  peer.message = "RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer";
  CHECK(classify(peer) == failure_class::exception);
}

TEST_CASE("the exception's type comes from the error file, else the traceback", "[failure_class]") {
  failure_evidence e;
  e.message = "torch.cuda.OutOfMemoryError: CUDA out of memory";
  CHECK(exception_type(e) == "OutOfMemoryError");
  e.message = "KeyboardInterrupt";
  CHECK(exception_type(e) == "KeyboardInterrupt");
  e.message = "something went wrong: badly";
  CHECK(exception_type(e).empty());

  failure_evidence chained;
  chained.log_tail = {"Traceback (most recent call last):", "  File \"a.py\", line 1",
                      "KeyError: 'x'", "",
                      "During handling of the above exception, another exception occurred:", "",
                      "Traceback (most recent call last):", "  File \"a.py\", line 3",
                      "TypeError: bad", "[2026-11-26] some later log line: 3"};
  CHECK(exception_type(chained) == "TypeError");
  failure_evidence none;
  none.log_tail = {"KeyError: 'x' (not after a traceback)"};
  CHECK(exception_type(none).empty());
}

TEST_CASE("a round's end tells the other nodes its class", "[failure_class]") {
  CHECK(class_tag(failure_class::exception, "TypeError") == "[exception:TypeError]");
  CHECK(class_tag(failure_class::oom_kill, "") == "[oom-kill]");
  // How other nodes learn the class: the round's record carries it
  // (round_record_test.cpp); an old event log's sentence is read by
  // launcher/legacy_round_end (legacy_round_end_test.cpp).
  for (auto name : class_names()) CHECK(parse_class(name));
  CHECK_FALSE(parse_class("oom"));
}

TEST_CASE("a failure a lost peer can cause is told from the worker's words, and only then",
          "[failure_class]") {
  auto gloo = exited(1);
  gloo.message = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
                 "Connection closed by peer [10.0.0.3]:47100";
  CHECK(lost_peer_can_cause(gloo));
  auto reset = exited(1);
  reset.log_tail = {"Traceback (most recent call last):",
                    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read "
                    "error [10.0.0.2]:1234: Connection reset by peer"};
  CHECK(lost_peer_can_cause(reset));
  auto nccl = exited(1);
  nccl.traceback = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                   "remote process exited or there was a network error, NCCL version 2.20.5";
  CHECK(lost_peer_can_cause(nccl));
  // NCCL's error handling aborts the process.
  auto aborted = killed(SIGABRT);
  aborted.log_tail = {"[rank1]:[E] Exception (either an error or timeout) detected by watchdog: "
                      "NCCL communicator was aborted on rank 1."};
  CHECK(lost_peer_can_cause(aborted));
  auto timeout = exited(1);
  timeout.message = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                    "Timed out waiting 5000ms for recv operation to complete";
  CHECK(lost_peer_can_cause(timeout));

  // Decided at once: the training's own error, the OOM killer, another
  // signal, dtrun's own kills, or nothing said.
  auto own = exited(1);
  own.message = "TypeError: unsupported operand type(s)";
  CHECK_FALSE(lost_peer_can_cause(own));
  CHECK_FALSE(lost_peer_can_cause(exited(1)));
  auto oom = killed(SIGKILL);
  oom.oom_killed = true;
  oom.log_tail = gloo.log_tail;
  CHECK_FALSE(lost_peer_can_cause(oom));
  auto segv = killed(SIGSEGV);
  segv.message = gloo.message;
  CHECK_FALSE(lost_peer_can_cause(segv));
  auto hung = gloo;
  hung.hang = "no progress from any worker for 60.0 s";
  CHECK_FALSE(lost_peer_can_cause(hung));
}
