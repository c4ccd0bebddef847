"""The neighbours benchmark's load (bench/neighbours.py runs it): the victim's workload and the
five attacks, each run in a process of its own (asyncio inside), so an attacker's hundreds of
requests in flight never queue behind the victim's, nor the victim's behind them, in one
event loop. Requests go over a small HTTP/1.1 client on raw sockets (keep-alive, one request
at a time per connection: thousands per second from one process, and no client library's
pool deciding what waits); the stalled readers speak HTTP/2 cleartext (prior knowledge) with
the `h2` package, their stream windows set to 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx

import neighbours_report as nr

REQUEST_TIMEOUT_S = 10.0


# --- an HTTP/1.1 client on a raw socket -------------------------------------------------------

class Http1:
    """One keep-alive HTTP/1.1 connection, one request at a time; reconnects after a failure
    or a `Connection: close`."""

    def __init__(self, base_url: str, timeout: float = REQUEST_TIMEOUT_S):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout = timeout
        self.reader = self.writer = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method: str, path: str, headers: dict,
                      body: bytes = b"") -> tuple[int, dict, bytes]:
        """The status, headers (lower-case names) and body; (0, {}, b"") when no answer came
        (refused, reset, timed out), the connection then closed."""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        try:
            return await asyncio.wait_for(self._exchange(data), self.timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            self.close()
            return 0, {}, b""

    async def _exchange(self, data: bytes) -> tuple[int, dict, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(data)
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                chunks.append((await self.reader.readexactly(size + 2))[:-2])
            body = b"".join(chunks)
        else:
            body = await self.reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body


def rpc(method: str, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": "n", "method": method,
                       "params": params}).encode()


def a2a_headers(token: str) -> dict:
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
            "Content-Type": "application/json"}


def retry_after(headers: dict, default: float = 0.2) -> float:
    try:
        return min(float(headers.get("retry-after", default)), 2.0)
    except ValueError:
        return default


class Stop:
    """A multiprocessing event watched from an event loop: `stopped` turns true within 50 ms
    of it being set, or at `deadline` (monotonic) whichever comes first."""

    def __init__(self, event, deadline: float):
        self.event, self.deadline = event, deadline
        self.stopped = False

    async def watch(self) -> None:
        while not self.stopped:
            if (self.event is not None and self.event.is_set()) or time.monotonic() >= self.deadline:
                self.stopped = True
                return
            await asyncio.sleep(0.05)


# --- the victim -------------------------------------------------------------------------------

async def victim_request(conn: Http1, path: str, token: str, method: str,
                         params_for) -> tuple[bool, str]:
    """One of the victim's calls: succeeded (HTTP 200 with a result of the expected shape),
    and how it was answered."""
    status, _, body = await conn.request("POST", path, a2a_headers(token),
                                         rpc(method, params_for()))
    kind = nr.answer_kind(status, body)
    if status != 200 or kind != "200":
        return False, kind
    try:
        result = json.loads(body).get("result", {})
    except ValueError:
        return False, "200 unparseable"
    if method == "GetTask":
        ok = result.get("status", {}).get("state") == "TASK_STATE_COMPLETED"
    elif method == "ListTasks":
        ok = bool(result.get("tasks")) and len(body) > 16 * 1024
    else:
        ok = "task" in result
    return ok, "200" if ok else "200 unexpected result"


async def paced(rate: float, offset: float, start: float, until: float, call,
                samples: list) -> None:
    """`call` at a fixed `rate` from `start + offset` until `until` (loop time); each sample's
    latency runs from when its request was due, so a request held up also counts the ones it
    held back (no coordinated omission)."""
    loop = asyncio.get_running_loop()
    period = 1.0 / rate
    due = start + offset
    while due < until:
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        ok, kind = await call()
        samples.append([(loop.time() - due) * 1000.0, ok, kind])
        due += period


async def watch_stream(url: str, token: str, task_id: str, until: float) -> dict:
    """A SubscribeToTask stream on a task that stays open, read until `until` (loop time):
    whether its snapshot came, whether it ended early, its frames and longest silence."""
    loop = asyncio.get_running_loop()
    opened_at = loop.time()
    out = {"opened": False, "ended_early": False, "end_reason": None, "frames": 0,
           "keepalives": 0, "longest_gap_s": 0.0, "status": None}
    last = opened_at
    body = rpc("SubscribeToTask", {"id": task_id})
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=None)

    async def read() -> None:
        nonlocal last
        async with httpx.AsyncClient(timeout=timeout) as client:
            async with client.stream("POST", url, headers=a2a_headers(token),
                                     content=body) as response:
                out["status"] = response.status_code
                if response.status_code != 200 or not response.headers.get(
                        "content-type", "").startswith("text/event-stream"):
                    out["end_reason"] = nr.answer_kind(response.status_code,
                                                       await response.aread())
                    return
                buffered = ""
                async for text in response.aiter_text():
                    buffered += text
                    while "\n\n" in buffered:
                        frame, buffered = buffered.split("\n\n", 1)
                        now = loop.time()
                        out["longest_gap_s"] = max(out["longest_gap_s"], now - last)
                        last = now
                        out["frames"] += 1
                        if all(line.startswith(":") for line in frame.splitlines() if line):
                            out["keepalives"] += 1
                        elif not out["opened"]:
                            data = "".join(line[5:].strip() for line in frame.splitlines()
                                           if line.startswith("data:"))
                            doc = json.loads(data) if data else {}
                            if doc.get("result", {}).get("task", {}).get("id") == task_id:
                                out["opened"] = True
                                out["snapshot_ms"] = (now - opened_at) * 1000.0
                            else:
                                out["end_reason"] = f"first event: {data[:200]}"
                                return
                out["end_reason"] = "the gateway ended the stream"

    reader = asyncio.ensure_future(read())
    try:
        await asyncio.wait_for(asyncio.shield(reader), max(until - loop.time(), 0.1))
        # Returned before the phase ended: the stream is gone.
        out["ended_early"] = True
    except asyncio.TimeoutError:
        reader.cancel()
    except Exception as e:  # noqa: BLE001 - any failure of the stream is its end
        out["ended_early"] = True
        out["end_reason"] = f"{type(e).__name__}: {e}"[:200]
    if not reader.done():
        try:
            await reader
        except (asyncio.CancelledError, Exception):  # noqa: BLE001
            pass
    elif reader.exception() is not None and not out["end_reason"]:
        out["end_reason"] = repr(reader.exception())[:200]
    out["longest_gap_s"] = max(out["longest_gap_s"], min(loop.time(), until) - last)
    return out


async def victim_async(cfg: dict, seconds: float) -> dict:
    loop = asyncio.get_running_loop()
    v = cfg["victim"]
    gateway = cfg["gateway"]
    start = loop.time() + 0.2
    until = start + seconds
    samples = {m: [] for m in nr.METHODS}
    writer_path = f"/v1/a2a/agents/{v['agent']}/rpc"

    def get_params():
        return {"id": v["get_task_id"]}

    def list_params():
        return {"pageSize": v["list_page_size"], "includeArtifacts": True}

    def send_params():
        return {"message": {"messageId": f"victim-{uuid.uuid4().hex}", "role": "ROLE_USER",
                            "parts": [{"text": "Summarise the A2A profile"}]},
                "configuration": {"returnImmediately": True}}

    plan = [("GetTask", v["reader_token"], get_params),
            ("ListTasks", v["reader_token"], list_params),
            ("SendMessage", v["writer_token"], send_params)]
    workers = []
    for method, token, params_for in plan:
        rate = v["rates"][method] / v["workers"]
        for w in range(v["workers"]):
            conn = Http1(gateway)

            async def call(conn=conn, method=method, token=token, params_for=params_for):
                return await victim_request(conn, writer_path, token, method, params_for)

            workers.append(paced(rate, w / (rate * v["workers"]), start, until, call,
                                 samples[method]))
    stream = None
    if v.get("stream_task_id"):
        stream = watch_stream(f"{gateway}/v1/a2a/agents/{v['stream_agent']}/rpc",
                              v["writer_token"], v["stream_task_id"], until)
    done = await asyncio.gather(*workers, *( [stream] if stream else []))
    return {"seconds": seconds, "methods": samples,
            "stream": done[-1] if stream else {"opened": False, "end_reason": "no stream"}}


def victim_main(cfg: dict, seconds: float) -> dict:
    """The victim's phase (in a process of its own): every method at its fixed rate and the
    stream, for `seconds`. Raw samples, summarised by the caller, and the CPU the victim's
    client used (`cpu_seconds`)."""
    cpu = time.process_time()
    out = asyncio.run(victim_async(cfg, seconds))
    out["cpu_seconds"] = time.process_time() - cpu
    return out


# --- the attacks ------------------------------------------------------------------------------

async def listing_flood(cfg: dict, stop: Stop, counts: dict, notes: dict, ready) -> None:
    """A tenant admin pages through the tenant's outbound registrations (pageSize 100), several
    listings at a time, over and over."""
    a = cfg["attacks"]["listing"]
    path = "/v1/a2a/agents?pageSize=100"
    headers = {"Authorization": f"Bearer {a['token']}"}

    async def worker() -> None:
        conn = Http1(cfg["gateway"])
        token = ""
        while not stop.stopped:
            status, hdrs, body = await conn.request(
                "GET", path + (f"&pageToken={token}" if token else ""), headers)
            kind = nr.answer_kind(status, body)
            counts[kind] = counts.get(kind, 0) + 1
            if status == 200:
                doc = json.loads(body)
                notes["registrations listed"] = (notes.get("registrations listed", 0)
                                                 + len(doc.get("agents", [])))
                token = doc.get("nextPageToken", "")
            else:
                token = ""
                await asyncio.sleep(retry_after(hdrs) if status == 429 else 0.05)
        conn.close()

    ramp = asyncio.get_running_loop().call_later(a["ramp_s"], ready.set)
    await asyncio.gather(*(worker() for _ in range(a["workers"])))
    ramp.cancel()


def random_client() -> str:
    """A made-up client address in 10.0.0.0/8, claimed in X-Forwarded-For through the
    loopback proxy the gateway trusts (as tests/it/neighbours/introspection.rs does)."""
    n = random.getrandbits(24)
    return f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}"


async def introspection_flood(cfg: dict, stop: Stop, counts: dict, notes: dict,
                              ready) -> None:
    """Hundreds of GetTask requests in flight, each with a fresh made-up bearer token (a UUID)
    and a made-up client address; one refused at once (not 401) waits 100 ms before its
    next, so the flood holds the introspection pool without spinning the cores."""
    a = cfg["attacks"]["introspection"]
    path = f"/v1/a2a/agents/{a['agent']}/rpc"

    async def worker() -> None:
        conn = Http1(cfg["gateway"])
        while not stop.stopped:
            headers = {"Authorization": f"Bearer {uuid.uuid4()}", "A2A-Version": "1.0",
                       "Content-Type": "application/json", "X-Forwarded-For": random_client()}
            status, _, body = await conn.request("POST", path, headers,
                                                 rpc("GetTask", {"id": str(uuid.uuid4())}))
            kind = nr.answer_kind(status, body)
            counts[kind] = counts.get(kind, 0) + 1
            if status != 401:
                await asyncio.sleep(0.1)
        conn.close()

    ramp = asyncio.get_running_loop().call_later(a["ramp_s"], ready.set)
    await asyncio.gather(*(worker() for _ in range(a["workers"])))
    ramp.cancel()


class StalledH2:
    """One HTTP/2 cleartext connection (prior knowledge) whose streams' flow-control window is
    0: every answer's head comes, none of its body can. Its streams are held open, never read,
    until `close`."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.heads: dict[int, asyncio.Future] = {}
        self.closed = False

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                                   h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.writer.write(self.conn.data_to_send())
        await self.writer.drain()
        self.pump = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for event in self.conn.receive_data(data):
                    sid = getattr(event, "stream_id", None)
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers)[":status"])
                        retry = dict(event.headers).get("retry-after")
                        fut = self.heads.get(sid)
                        if fut and not fut.done():
                            fut.set_result((status, retry))
                    elif isinstance(event, (h2.events.StreamReset,)):
                        fut = self.heads.get(sid)
                        if fut and not fut.done():
                            fut.set_result((0, None))
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        raise ConnectionError("GOAWAY")
                out = self.conn.data_to_send()
                if out:
                    self.writer.write(out)
        except Exception:  # noqa: BLE001 - the connection is gone either way
            pass
        self.closed = True
        for fut in self.heads.values():
            if not fut.done():
                fut.set_result((0, None))

    async def list_tasks(self, path: str, token: str, params: dict) -> tuple[int, str | None]:
        """One ListTasks: the status of its answer's head and its Retry-After; the stream is
        then left open with its body unread."""
        if self.closed:
            return 0, None
        body = rpc("ListTasks", params)
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [
            (":method", "POST"), (":scheme", "http"), (":authority", f"{self.host}:{self.port}"),
            (":path", path), ("content-type", "application/json"), ("a2a-version", "1.0"),
            ("authorization", f"Bearer {token}"), ("content-length", str(len(body)))])
        self.conn.send_data(sid, body, end_stream=True)
        self.heads[sid] = asyncio.get_running_loop().create_future()
        self.writer.write(self.conn.data_to_send())
        try:
            await self.writer.drain()
            return await asyncio.wait_for(self.heads[sid], REQUEST_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            return 0, None

    def close(self) -> None:
        if hasattr(self, "pump"):
            self.pump.cancel()
        if hasattr(self, "writer"):
            self.writer.close()


async def stalled_readers(cfg: dict, stop: Stop, counts: dict, notes: dict, ready) -> None:
    """Connections that hold ListTasks answers they never read: first the ~1 MiB pages (each
    connection sending until its first refusal, at most `per_large` each), then the ~31 KiB
    ones, at most `in_flight` requests of all connections waiting for their heads at once (as
    tests/it/streaming/stalled_window.rs does). A 429 waits its Retry-After and sends again."""
    a = cfg["attacks"]["stalled"]
    parts = urlsplit(cfg["gateway"])
    path = f"/v1/a2a/agents/{a['agent']}/rpc"
    turn = asyncio.Semaphore(a["in_flight"])
    conns: list[StalledH2] = []

    async def connection(params: dict, most: int, kind: str) -> None:
        c = StalledH2(parts.hostname, parts.port)
        conns.append(c)
        try:
            await c.open()
        except OSError:
            counts["no answer"] = counts.get("no answer", 0) + 1
            return
        sent = 0
        while sent < most and not stop.stopped:
            async with turn:
                status, retry = await c.list_tasks(path, a["token"], params)
            key = str(status) if status else "no answer"
            counts[key] = counts.get(key, 0) + 1
            notes[f"{kind} {key}"] = notes.get(f"{kind} {key}", 0) + 1
            if status == 429:
                await asyncio.sleep(min(float(retry or 0.2), 2.0))
                continue
            if status != 200:
                break
            sent += 1

    large = [connection(a["large_params"], a["per_large"], "~1 MiB page")
             for _ in range(a["large_connections"])]
    try:
        await asyncio.gather(*large)
        ready.set()
        await asyncio.gather(*(connection(a["small_params"], a["per_small"], "~31 KiB page")
                               for _ in range(a["small_connections"])))
        ready.set()
        while not stop.stopped:
            await asyncio.sleep(0.05)
    finally:
        notes["connections"] = len(conns)
        notes["connections closed by the gateway"] = sum(1 for c in conns if c.closed)
        for c in conns:
            c.close()


async def tight_loop(cfg: dict, stop: Stop, counts: dict, notes: dict, ready,
                     name: str) -> None:
    """`workers` connections each sending the attack's one request again as soon as it is
    answered (the rate-limit attack: as fast as it can), or after `pause_s` when it is
    refused (429)."""
    a = cfg["attacks"][name]
    path = f"/v1/a2a/agents/{a['agent']}/rpc"
    headers = a2a_headers(a["token"])
    body = rpc(a["method"], a["params"])

    async def worker() -> None:
        conn = Http1(cfg["gateway"])
        while not stop.stopped:
            status, _, answer = await conn.request("POST", path, headers, body)
            kind = nr.answer_kind(status, answer)
            counts[kind] = counts.get(kind, 0) + 1
            if status != 200 and a.get("pause_s"):
                await asyncio.sleep(a["pause_s"])
            elif status == 0:
                await asyncio.sleep(0.05)
        conn.close()

    ramp = asyncio.get_running_loop().call_later(a["ramp_s"], ready.set)
    await asyncio.gather(*(worker() for _ in range(a["workers"])))
    ramp.cancel()


async def attack_async(name: str, cfg: dict, ready, stop_event, limit_s: float) -> dict:
    stop = Stop(stop_event, time.monotonic() + limit_s)
    watcher = asyncio.ensure_future(stop.watch())
    counts: dict[str, int] = {}
    notes: dict[str, int] = {}
    started, cpu = time.monotonic(), time.process_time()
    if name == "listing":
        await listing_flood(cfg, stop, counts, notes, ready)
    elif name == "introspection":
        await introspection_flood(cfg, stop, counts, notes, ready)
    elif name == "stalled":
        await stalled_readers(cfg, stop, counts, notes, ready)
    else:
        await tight_loop(cfg, stop, counts, notes, ready, name)
    watcher.cancel()
    seconds = time.monotonic() - started
    return {"seconds": seconds, "answers": nr.tally_counts(counts), "notes": notes,
            "requests_per_s": sum(counts.values()) / seconds if seconds else None,
            "cpu_seconds": time.process_time() - cpu}


def attack_main(name: str, cfg: dict, ready, stop_event, limit_s: float, results) -> None:
    """One attack (in a process of its own, at a lower priority than the victim's and the
    gateway's: on a 2-core machine the attacker's own client CPU would otherwise be measured
    as the gateway's unfairness), until `stop_event` or `limit_s`. Puts its tally on
    `results`."""
    try:
        os.nice(cfg.get("attacker_nice", 5))
    except OSError:
        pass
    try:
        results.put(asyncio.run(attack_async(name, cfg, ready, stop_event, limit_s)))
    except BaseException as e:  # noqa: BLE001 - reported, not lost with the process
        ready.set()
        results.put({"error": f"{type(e).__name__}: {e}"})
