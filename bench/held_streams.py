"""Memory per open stream at scale: SubscribeToTask streams held open by the Rust stream holder
(examples/bench_stream_holder.rs) against a fresh gateway instance per measurement, over HTTP/2
(60 streams per connection) and HTTP/1.1 (one connection per stream).

Each measurement starts its own gateway (the bench stack's configuration, own ports, its
connection bound raised above the stream count), so no measurement inherits the heap another
left behind. A first holder opens `WARM` streams, which stay open: the gateway's pools,
caches and runtime reach the size opening streams at this pace needs, a cost paid once per
replica, not per stream. RSS is read then, and again with every measured stream open (each
has received its snapshot) and after holding them a few seconds more (none may end); the
cost per stream is the larger growth divided by the measured streams. The tasks (ag-approver,
waiting for an approval nobody gives) are created once through the bench stack's gateway and
shared by every measurement.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx

import benchlib as bl

ROOT = Path(__file__).resolve().parent.parent
AGENT = "ag-approver"
HOLD_SECONDS = 5.0
# Streams opened, and held, before the measured ones: as many as the holder opens at once.
WARM = 128


async def create_tasks(gateway: str, count: int, headers: dict, body) -> list[str]:
    """`count` tasks on ag-approver (SendMessage, returnImmediately); their ids."""
    nonce = uuid.uuid4().hex[:8]
    sem = asyncio.Semaphore(32)
    limits = httpx.Limits(max_connections=48, max_keepalive_connections=48)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def create(i: int) -> str:
            async with sem:
                r = await client.post(f"{gateway}/v1/a2a/agents/{AGENT}/rpc", headers=headers,
                                      content=body(f"held-{nonce}-{i}"))
                return r.json()["result"]["task"]["id"]

        return await asyncio.gather(*(create(i) for i in range(count)))


class Holder:
    """One examples/bench_stream_holder process holding `task_ids`' streams."""

    def __init__(self, holder: str, url: str, token: str, protocol: str, task_ids: list[str]):
        self.proc = subprocess.Popen([holder, url, token, protocol], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write("\n".join(task_ids) + "\n\n")
        self.proc.stdin.flush()

    def opened(self) -> dict:
        """Once every stream has its snapshot or failed: opened, failed, errors."""
        return json.loads(self.proc.stdout.readline() or "{}")

    def stop(self) -> dict:
        """Closes the streams; how many the gateway ended while they were held."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        ended = json.loads(self.proc.stdout.readline() or "{}")
        self.proc.wait(timeout=60)
        return ended

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def heaptrack(env: dict, out_dir: str | None, name: str):
    """With BENCH_HELD_HEAPTRACK=DIR, the gateway's heap is recorded by heaptrack's preload
    library into DIR/NAME.zst (`heaptrack_print --print-peaks` reads it); its RSS figures then
    include heaptrack's own. Returns the interpreter process writing the record, or None."""
    if not out_dir:
        return None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    fifo = Path(out_dir) / f"{name}.fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    recorder = subprocess.Popen(
        f"/usr/lib/heaptrack/libexec/heaptrack_interpret < {fifo} | zstd -c > {out_dir}/{name}.zst",
        shell=True)
    env["LD_PRELOAD"] = "/usr/lib/heaptrack/libheaptrack_preload.so"
    env["DUMP_HEAPTRACK_OUTPUT"] = str(fifo)
    return recorder


def measure(bin_dir: Path, holder: str, token: str, warm_ids: list[str], task_ids: list[str],
            protocol: str, spawn_listening, stop, proc_status, log, rnd: int = 0) -> dict:
    """One fresh gateway, `len(task_ids)` streams held over `protocol` after `warm_ids`' ones;
    RSS before and with them open."""
    count = len(task_ids)
    room = str(count + len(warm_ids) + 256)
    env = dict(os.environ, Q_A2A_LISTEN="127.0.0.1:0", Q_A2A_METRICS_LISTEN="127.0.0.1:0",
               Q_A2A_MAX_CONNECTIONS=room, Q_A2A_OBSERVERS_GLOBAL=room,
               Q_A2A_OBSERVERS_PER_TENANT=room, Q_A2A_OBSERVERS_PER_PRINCIPAL=room,
               # Leases of its own: those of the measurement before may outlive its gateway
               # by their TTL.
               Q_A2A_REDIS_KEY_PREFIX=f"{os.environ.get('Q_A2A_REDIS_KEY_PREFIX', 'q-a2a')}"
                                      f"-held-{protocol}-{count}-{rnd}")
    # Its log beside the bench stack's (.bench/), for a measurement that needs explaining.
    log_path = ROOT / ".bench" / f"held-{protocol}-{count}-{rnd}.log"
    log_path.parent.mkdir(exist_ok=True)
    recorder = heaptrack(env, os.environ.get("BENCH_HELD_HEAPTRACK"),
                         f"held-{protocol}-{count}-{rnd}")
    with open(log_path, "w") as gw_log:
        gw_proc, url, _ = spawn_listening([str(bin_dir / "q-a2a-gateway"), "serve"], env,
                                          stderr=gw_log)
    rpc = f"{url}/v1/a2a/agents/{AGENT}/rpc"
    holders: list[Holder] = []
    try:
        holders.append(Holder(holder, rpc, token, protocol, warm_ids))
        warm = holders[0].opened()
        if warm.get("opened") != len(warm_ids):
            raise RuntimeError(f"warm-up streams did not open: {warm}")
        time.sleep(1.0)
        rss_before = proc_status(gw_proc.pid, "VmRSS")
        started = time.perf_counter()
        holders.append(Holder(holder, rpc, token, protocol, task_ids))
        opened = holders[1].opened()
        open_seconds = time.perf_counter() - started
        time.sleep(1.0)
        rss_open = proc_status(gw_proc.pid, "VmRSS")
        fds = len(os.listdir(f"/proc/{gw_proc.pid}/fd"))
        time.sleep(HOLD_SECONDS)
        rss_held = proc_status(gw_proc.pid, "VmRSS")
        ended = holders[1].stop()
        holders[0].stop()
    finally:
        for h in holders:
            h.kill()
        stop(gw_proc)
        if recorder is not None:
            recorder.wait(timeout=120)
    n_open = opened.get("opened", 0)
    log(f"  {protocol} {count} round {rnd}: {n_open} open in {open_seconds:.1f} s, RSS "
        f"{rss_before / 1024:.1f} -> {rss_open / 1024:.1f} -> {rss_held / 1024:.1f} MiB, "
        f"{ended.get('ended_early')} ended while held, errors {opened.get('errors')}")
    return {
        "protocol": protocol, "streams": count, "warm_streams": len(warm_ids),
        "open_streams": n_open, "failed": opened.get("failed"),
        "errors": opened.get("errors", []), "ended_early": ended.get("ended_early"),
        "open_seconds": open_seconds, "gateway_fds": fds, "rss_before_kib": rss_before,
        "rss_open_kib": rss_open, "rss_held_kib": rss_held,
        "kib_per_stream": (max(rss_open, rss_held) - rss_before) / n_open if n_open else None,
    }


def scenario(gateway: str, bin_dir: Path, holder: str, counts: list[int], rounds: int,
             headers: dict, body, spawn_listening, stop, proc_status, log) -> dict:
    """Each count over each protocol `rounds` times, each measurement on a fresh gateway; the
    rounds interleave the protocols (h2, h1, then h1, h2, ...) as the request scenarios do."""
    tasks = asyncio.run(create_tasks(gateway, WARM + max(counts), headers, body))
    runs = []
    for count in counts:
        for rnd in range(rounds):
            for protocol in ("h2", "h1") if rnd % 2 == 0 else ("h1", "h2"):
                run = measure(bin_dir, holder, "tok-alice", tasks[:WARM],
                              tasks[WARM:WARM + count], protocol, spawn_listening, stop,
                              proc_status, log, rnd)
                run["round"] = rnd
                runs.append(run)
    return {"runs": runs}


def find_all(results: dict, protocol: str, count: int) -> list[dict]:
    """Every round's measurement of `count` streams over `protocol`, in round order."""
    return sorted((r for r in results.get("held_streams", {}).get("runs", [])
                   if r["protocol"] == protocol and r["streams"] == count),
                  key=lambda r: r.get("round", 0))


def table(held: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["Protocol", "Streams", "round", "open", "ended while held", "seconds to open",
               f"RSS with {WARM} open MiB", "RSS all open MiB", "KiB per stream"]
    ordered = sorted(held.get("runs", []),
                     key=lambda r: (r["streams"], r["protocol"] != "h2", r.get("round", 0)))
    rows = [[{"h2": "HTTP/2", "h1": "HTTP/1.1"}[r["protocol"]], str(r["streams"]),
             str(r.get("round", 0)), str(r["open_streams"]), str(r["ended_early"]),
             bl.fmt(r["open_seconds"], 1), bl.fmt(r["rss_before_kib"] / 1024, 1),
             bl.fmt(max(r["rss_open_kib"], r["rss_held_kib"]) / 1024, 1),
             bl.fmt(r["kib_per_stream"], 1)] for r in ordered]
    return headers, rows
