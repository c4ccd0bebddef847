"""Allocations per request of one request shape, and where in the gateway they are made.

`scripts/alloc-sites` runs the gateway under heaptrack twice: once serving COUNT requests of the
shape after a warm-up, once with the warm-up alone. This reads both recordings' allocation stacks
(`heaptrack_print --flamegraph-cost-type allocations`, demangled) and prints the difference per
request: in total, and by site, a site being the innermost frame of the gateway's own code and
the two frames it calls (a stack without such a frame is named by the frames above the allocator).
Startup, the warm-up and the background tasks' work in the same time are in both recordings and
cancel out, up to the background work's own variation.

    python3 bench/alloc_sites.py WITH.stacks WITHOUT.stacks COUNT [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# File names too common to say a frame is the gateway's (dependencies have them too).
COMMON = {"mod", "lib", "main", "tests", "error", "http", "server", "client", "config", "cache",
          "body", "request", "response", "map", "de", "ser", "value", "util", "layer", "service",
          "future", "macros", "stream", "sync", "time", "io", "net", "codec", "types", "raw",
          "dispatch"}


def own_pattern(src: Path = ROOT / "src") -> re.Pattern:
    """Frames of the gateway's own code in a demangled stack: its crate path, or (for inlined
    frames, which heaptrack names by function and file name only) one of its file names."""
    names = sorted({f.stem for f in src.rglob("*.rs")} - COMMON)
    files = "|".join(re.escape(n) for n in names)
    return re.compile(rf"q_a2a_gateway::|\((?:{files})\.rs\)")


OWN = own_pattern()
# Frames of the allocator itself, skipped when a stack has none of the gateway's.
ALLOCATOR = re.compile(r"alloc::alloc|__rust|__rdl_|GlobalAlloc|RawVec|raw_vec|box_new_uninit|"
                       r"alloc_impl|grow_impl|finish_grow|^malloc|^realloc|^calloc")


def parse(text: str) -> list[tuple[list[str], int]]:
    """`frame;frame;... count` lines (outermost frame first)."""
    rows = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            rows.append((stack.split(";"), int(count)))
    return rows


def short(frame: str) -> str:
    frame = re.sub(r"::h[0-9a-f]{16}", "", frame)
    frame = re.sub(r"\[[0-9a-f]{16}\]", "", frame)
    return frame[:120]


def site(stack: list[str]) -> str:
    own = [i for i, frame in enumerate(stack) if OWN.search(frame)]
    if own:
        return " -> ".join(short(f) for f in stack[own[-1]:own[-1] + 3])
    outside = [f for f in stack if not ALLOCATOR.search(f)]
    return "(no gateway frame) " + " -> ".join(short(f) for f in outside[-3:])


def by_site(rows: list[tuple[list[str], int]]) -> collections.Counter:
    sites: collections.Counter = collections.Counter()
    for stack, count in rows:
        sites[site(stack)] += count
    return sites


def per_request(with_requests: collections.Counter, without: collections.Counter,
                count: int) -> tuple[float, list[tuple[str, float]]]:
    """Total allocations per request, and each site's, largest first (sites that only the
    recording without the requests has come out negative and are left out)."""
    total = (sum(with_requests.values()) - sum(without.values())) / count
    sites = [(name, (with_requests[name] - without.get(name, 0)) / count)
             for name in with_requests]
    sites = [(name, n) for name, n in sites if n > 0]
    sites.sort(key=lambda s: -s[1])
    return total, sites


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("with_requests", type=Path)
    parser.add_argument("without", type=Path)
    parser.add_argument("count", type=int)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    total, sites = per_request(by_site(parse(args.with_requests.read_text())),
                               by_site(parse(args.without.read_text())), args.count)
    print(f"allocations per request: {total:.1f}")
    for name, n in sites[:args.top]:
        print(f"{n:8.2f}  {name}")


if __name__ == "__main__":
    main()
