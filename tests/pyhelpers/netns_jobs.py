"""What the multi-host e2e tests share (network-namespace hosts,
netns_hosts.py, running examples/ddp_gloo.py's DDP workers): the job's
environment, the training's arguments, waiting for every agent."""

import dtrun_helpers as dh

EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"


def env():
    # Gloo must use the namespace's own interface, named eth0 on every host.
    return dh.job_env(GLOO_SOCKET_IFNAME="eth0")


def train_args(out, *extra):
    return ["--python", dh.PYTHON, str(EXAMPLE), "--checkpoint-dir", str(out), *extra]


def finish(procs, timeout=240):
    """Each agent's (exit code, stdout, stderr), once all have exited."""
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        outs.append((p.returncode, stdout, stderr))
    return outs
