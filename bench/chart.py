"""Draws bench/results/latest.json as a PNG beside it (latest.png): for every scenario, the
throughput and the p99 latency of the gateway and of each baseline measured in the same run,
on log scales (the targets differ by orders of magnitude). docs/performance.md
shows the picture. scripts/bench draws it after each run; to redraw from a results file:

    scripts/bench --chart-only [bench/results/latest.json]

matplotlib comes from bench/requirements.txt (scripts/bench installs it into .venv).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

# The gateway first, then its peers and ceilings; a target not named here comes last.
TARGET_ORDER = ["gateway", "gateway_running", "python", "hyper", "pgbench", "pgbench_row",
                "upstream"]
COLORS = {
    "gateway": "#1f77b4",
    "gateway_running": "#17becf",
    "python": "#ff7f0e",
    "hyper": "#7f7f7f",
    "pgbench": "#2ca02c",
    "pgbench_row": "#98df8a",
    "upstream": "#9467bd",
}


def _number(value) -> float | None:
    """A plottable positive number, or None (missing, NaN, zero: nothing to draw on a log axis)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return float(value)
    return None


def chart_series(results: dict) -> tuple[list[str], list[dict]]:
    """Scenario titles (in run order) and one series per target: its label, colour, and its
    req/s and p99 ms per scenario (None where the scenario has no such target or value)."""
    scenarios = list(results.get("scenarios", {}).values())
    titles = [sc["title"] for sc in scenarios]
    present = {name for sc in scenarios for name in sc["targets"]}
    order = [t for t in TARGET_ORDER if t in present] + sorted(present - set(TARGET_ORDER))
    series = []
    for name in order:
        stats = [sc["targets"].get(name, {}) for sc in scenarios]
        series.append(
            {
                "target": name,
                "label": bl.TARGET_LABEL.get(name, name),
                "color": COLORS.get(name, "#bcbd22"),
                "rps": [_number(s.get("rps")) for s in stats],
                "p99_ms": [_number(s.get("p99_ms")) for s in stats],
            }
        )
    return titles, series


def bar_positions(series: list[dict], rows: int) -> tuple[dict[tuple[int, int], float], float]:
    """Where each bar goes: {(series index, scenario row): y} and the bar height. A scenario's
    bars are packed around its row, in series order, with no gap for an absent target; every
    bar has the same height (the busiest scenario's share of the row)."""
    present = [
        [i for i, s in enumerate(series) if s["rps"][r] is not None or s["p99_ms"][r] is not None]
        for r in range(rows)
    ]
    height = 0.8 / max([len(p) for p in present] + [1])
    positions = {}
    for r, indices in enumerate(present):
        top = r - height * len(indices) / 2
        for j, i in enumerate(indices):
            positions[(i, r)] = top + height * (j + 0.5)
    return positions, height


def subtitle(results: dict) -> str:
    machine = results.get("machine", {})
    parts = [
        f"Run {results.get('date', '?')}",
        f"{results.get('mode', '?')} mode, {results.get('rounds', '?')} round(s) of "
        f"{bl.fmt(results.get('seconds'), 0)} s per target, medians",
        f"{machine.get('nproc', '?')} cores shared with the load generators",
    ]
    return "; ".join(parts)


def render_chart(results: dict, out: Path) -> Path | None:
    """Writes the PNG to `out` and returns it. A run with no request scenarios (say `--only
    streaming`) has nothing to draw: an older chart at `out` is removed rather than left beside
    results it does not show, and None is returned."""
    titles, series = chart_series(results)
    if not titles:
        out.unlink(missing_ok=True)
        return None

    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    rows = list(range(len(titles)))
    positions, height = bar_positions(series, len(rows))
    fig, axes = plt.subplots(
        1, 2, figsize=(15, 1.0 + 0.75 * len(titles)), sharey=True, constrained_layout=True
    )
    panels = [
        ("rps", "Throughput (req/s, log scale; higher is better)", lambda v: bl.fmt(v)),
        ("p99_ms", "p99 latency (ms, log scale; lower is better)", lambda v: bl.fmt(v, 2)),
    ]
    for ax, (key, xlabel, shown) in zip(axes, panels):
        for i, s in enumerate(series):
            drawn = [(positions[(i, r)], v) for r, v in enumerate(s[key]) if v is not None]
            if not drawn:
                continue
            bars = ax.barh(
                [y for y, _ in drawn],
                [v for _, v in drawn],
                height=height * 0.9,
                color=s["color"],
                label=s["label"] if key == "rps" else None,
            )
            ax.bar_label(bars, labels=[shown(v) for _, v in drawn], padding=2, fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", which="major", alpha=0.3)
        ax.margins(x=0.15)
    axes[0].set_yticks(rows, titles)
    axes[0].invert_yaxis()  # first scenario on top, as in the table
    fig.legend(loc="outside lower center", ncols=len(series), fontsize=9, frameon=False)
    fig.suptitle("q-a2a-gateway against its baselines, same run\n" + subtitle(results), fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent / "results" / "latest.json"
    out = render_chart(json.loads(source.read_text()), source.with_suffix(".png"))
    print(out if out else f"{source}: no request scenario, no chart")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
