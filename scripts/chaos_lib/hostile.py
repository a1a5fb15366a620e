"""A burst of hostile clients against a store: garbage bytes, frames cut
short, absurd lengths, connections held open silently, for `seconds`.
Run inside a host's namespace by the chaos harness; exits 0 when done (a
refused or reset connection is the store defending itself, not an error)."""

import os
import random
import socket
import struct
import sys
import time


def main() -> int:
    host, port, seconds, seed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    held = []
    sent = 0
    end = time.monotonic() + seconds
    total = 0
    # Bounded in count too: on 2 shared cores an unbounded loop would be a
    # CPU-starvation fault, not the one this is.
    while time.monotonic() < end and total < 300:
        total += 1
        try:
            s = socket.create_connection((host, port), timeout=1)
        except OSError:
            continue
        kind = rng.randrange(4)
        try:
            if kind == 0:    # random bytes
                s.sendall(os.urandom(rng.randint(1, 4096)))
            elif kind == 1:  # a command byte and a key length far beyond any budget
                s.sendall(bytes([rng.randrange(20)]) + struct.pack("<Q", rng.choice([2**40, 2**63])))
            elif kind == 2:  # a frame cut in the middle of its length
                s.sendall(bytes([rng.randrange(20)]) + b"\x05\x00\x00")
            else:            # say nothing and hold the connection
                held.append(s)
                if len(held) > 32:
                    held.pop(0).close()
                continue
            sent += 1
        except OSError:
            pass
        s.close()
    for s in held:
        s.close()
    print(f"hostile: {sent} garbage connections, {seconds}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
