"""What renewing observer leases costs Redis: the gateway's batch script (`RENEW_MANY` in
src/lease.rs, one call per round and `RENEW_BATCH` leases) against the baseline of one call per
lease (the script below), measured in the same run on a private `redis-server`.

For each batch size and principal spread (all leases of one principal, or each lease its own),
the leases are written into their three sorted sets as the acquire script would leave them,
then renewed for a number of rounds both ways; Redis' own `INFO commandstats` says how long
the scripts ran (server time, what blocks every other client of that Redis while it runs).
The per-lease baseline also pays a round trip per lease on the client side, which this does not
count: the ratio is the floor of what batching saves.

    python3 bench/lease_renewal.py [--leases 128,512] [--rounds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One lease per call: what a renewer per stream ran every round (the baseline).
RENEW_ONE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 3 do
  local score = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if not score or tonumber(score) <= now then
    for j = 1, 3 do redis.call('ZREM', KEYS[j], ARGV[1]) end
    return 0
  end
end
for i = 1, 3 do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return 1
"""


def gateway_script() -> tuple[str, int]:
    """The batch script and batch size, read from the gateway's source."""
    source = (ROOT / "src" / "lease.rs").read_text()
    script = re.search(r'const RENEW_MANY: &str = r#"(.*?)"#;', source, re.S)
    batch = re.search(r"const RENEW_BATCH: usize = (\d+);", source)
    if not script or not batch:
        raise SystemExit("src/lease.rs: RENEW_MANY or RENEW_BATCH not found")
    return script.group(1), int(batch.group(1))


def quoted(text: str) -> str:
    """A redis-cli double-quoted argument."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def script_usec(port: int, commands: list[str]) -> int:
    """Runs `commands` through redis-cli; microseconds Redis spent in EVAL since the last
    `CONFIG RESETSTAT` among them."""
    out = subprocess.run(["redis-cli", "-p", str(port)], input="\n".join(commands + ["INFO commandstats"]) + "\n",
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"cmdstat_eval:calls=(\d+),usec=(\d+)", out)
    if not found:
        raise SystemExit(f"no EVAL in commandstats: {out[-400:]}")
    return int(found.group(2))


# The TTL the renewals set (ms), and the expiry the leases start with: far beyond it, so a
# renewed lease is one whose expiry came down to within the TTL.
TTL_MS = 15000
SETUP_EXPIRY_MS = 10**7


def principal(i: int, principals: int) -> str:
    return f"p{i % principals}"


def setup(leases: int, principals: int) -> list[str]:
    """An empty Redis holding `leases` leases in their sets, then its statistics reset."""
    expiry = int(time.time() * 1000) + SETUP_EXPIRY_MS
    return ["FLUSHALL"] + [f"ZADD {k} {expiry} id{i}" for i in range(leases)
                           for k in ("g", "t", principal(i, principals))] + ["CONFIG RESETSTAT"]


def renew_batched(port: int, script: str, leases: int, principals: int, rounds: int) -> int:
    """Microseconds in Redis renewing every lease `rounds` times, one call per round."""
    keys = ["g", "t"] + [f"p{i}" for i in range(principals)]
    args = [str(TTL_MS), str(leases)] + [f"id{i}" for i in range(leases)]
    args += [str(x) for i in range(leases) for x in (1, 2, 3 + i % principals)]
    batch = f"EVAL {quoted(script)} {len(keys)} {' '.join(keys)} {' '.join(args)}"
    return script_usec(port, setup(leases, principals) + [batch] * rounds)


def renew_each(port: int, leases: int, principals: int, rounds: int) -> int:
    """Microseconds in Redis renewing every lease `rounds` times, one call per lease."""
    single = [f"EVAL {quoted(RENEW_ONE)} 3 g t {principal(i, principals)} id{i} {TTL_MS}"
              for i in range(leases)]
    return script_usec(port, setup(leases, principals) + single * rounds)


def measure(port: int, script: str, leases: int, principals: int, rounds: int) -> dict:
    batched = renew_batched(port, script, leases, principals, rounds) / rounds
    per_lease = renew_each(port, leases, principals, rounds) / rounds
    return {"leases": leases, "principals": principals, "batch_ms": batched / 1000,
            "per_lease_ms": per_lease / 1000, "ratio": per_lease / batched if batched else None}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis(port: int):
    """A `redis-server` of its own on `port` (nothing saved), killed on exit."""
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"redis-server did not answer on port {port}")
        yield
    finally:
        redis.kill()
        redis.wait()


def renewed(port: int, key: str) -> int:
    """Members of the sorted set `key` expiring within the TTL from now, by Redis' clock: the
    leases a renewal extended (from their setup expiry, far beyond it)."""
    now = subprocess.run(["redis-cli", "-p", str(port), "TIME"], capture_output=True, text=True,
                         check=True).stdout.split()
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    out = subprocess.run(["redis-cli", "-p", str(port), "ZCOUNT", key, f"({now_ms}",
                          str(now_ms + TTL_MS)], capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", default=None, help="batch sizes (default: the gateway's, and 512)")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    script, batch = gateway_script()
    sizes = [int(n) for n in args.leases.split(",")] if args.leases else sorted({batch, 512})
    port = free_port()
    with private_redis(port):
        print(f"Redis time per renewal round (RENEW_BATCH = {batch}), {args.rounds} rounds each:\n")
        print("| Leases | Principals | one call | one call per lease | ratio |")
        print("|---:|---:|---:|---:|---:|")
        for leases in sizes:
            for principals in (1, leases):
                r = measure(port, script, leases, principals, args.rounds)
                print(f"| {r['leases']} | {r['principals']} | {r['batch_ms']:.2f} ms | "
                      f"{r['per_lease_ms']:.2f} ms | {r['ratio']:.1f}x |")


if __name__ == "__main__":
    main()
