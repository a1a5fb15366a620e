"""The .deb as an admin installs it: `dpkg -i` in a plain Debian 13 root
with nothing added (scripts/rootfs-run --rootfs=trixie: minbase, no Python,
no Boost or fmt), then the installed /usr/bin/dtrun runs a real 2-worker
job whose workers use the job's store through the installed dtrun-store,
and `dpkg -r` removes it again. dpkg refuses a package whose Depends that
root cannot meet, so this also proves the Depends dpkg-shlibdeps computed
are satisfiable there."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import packages  # noqa: E402

ROOTFS_RUN = dh.SOURCE_DIR / "scripts" / "rootfs-run"
CANNOT = 77  # rootfs-run: the rootfs cannot be made on this machine

# Each worker: its rank and world size into the store, a shared counter,
# then it waits for the other's key and prints what it read.
WORKER = r'''
set -eu
store="dtrun-store --endpoint $MASTER_ADDR:$MASTER_PORT --timeout 60"
$store set "rank$RANK" "$RANK/$WORLD_SIZE/$LOCAL_RANK"
count=$($store add joined 1)
$store wait rank0 rank1
other=$($store get "rank$((1 - RANK))")
echo "worker $RANK of $WORLD_SIZE: joined as $count, the other wrote $other"
'''

INSIDE = r'''
set -eu
dpkg -i "$1" >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 10; }
test -x /usr/bin/dtrun && test -f /usr/share/man/man1/dtrun.1.gz || exit 11
test -f /usr/share/bash-completion/completions/dtrun || exit 12
echo "version: $(/usr/bin/dtrun --version)"
command -v python3 >/dev/null && echo "python3 is in the root" && exit 13
rc=0
/usr/bin/dtrun --standalone --nproc-per-node=2 --no-python /bin/sh -c "$2" || rc=$?
dpkg -r dtrun >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 14; }
test ! -e /usr/bin/dtrun && test ! -e /usr/share/man/man1/dtrun.1.gz || exit 15
exit $rc
'''


def test_deb_installs_into_plain_debian_13_and_runs_a_job(tmp_path):
    art = packages.artifacts()
    r = subprocess.run([str(ROOTFS_RUN), "--rootfs=trixie", "--bind", str(art.deb.parent), "--",
                        "/bin/sh", "-c", INSIDE, "inside", str(art.deb), WORKER],
                       env=dh.job_env(PATH="/usr/sbin:/usr/bin:/sbin:/bin"),
                       capture_output=True, text=True, timeout=300)
    if r.returncode == CANNOT:
        message = f"no Debian 13 rootfs on this machine: {r.stderr.strip()}"
        print(message)
        pytest.skip(message)
    assert r.returncode != 10, f"dpkg -i failed in plain Debian 13:\n{r.stdout}"
    assert r.returncode == 0, f"rc {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert f"version: {packages.build_version()}" in r.stdout.splitlines()
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("worker "))
    assert len(lines) == 2, r.stdout
    assert lines[0].startswith("worker 0 of 2: joined as ")
    assert lines[0].endswith(", the other wrote 1/2/1")
    assert lines[1].startswith("worker 1 of 2: joined as ")
    assert lines[1].endswith(", the other wrote 0/2/0")
    joined = sorted(line.split("joined as ")[1].split(",")[0] for line in lines)
    assert joined == ["1", "2"]
