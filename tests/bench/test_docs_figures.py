"""The figures docs/performance.md and the README quote are the latest benchmark run's
(bench/results/latest.json and latest.md), not a memory of an earlier one:

- the "Latest results" section holds latest.md as generated, between its markers;
- every bolded verdict line under "What the numbers say" (`- **<target>: <measured>,
  <verdict>**`) is a target of latest.json, with its measured value and verdict as judged;
- every target that is not MET is discussed there by such a line;
- the README's start-up figure is latest.json's, rounded to the millisecond;
- the "Neighbours: latest results" section holds bench/results/neighbours.md (a full run's),
  and every neighbours target not MET is discussed there with its figures, and no other.

Cheap: reads files, runs nothing."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PERFORMANCE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"

BEGIN = "<!-- bench/results/latest.md begins: tests/bench/test_docs_figures.py -->"
END = "<!-- bench/results/latest.md ends -->"
BOLD_ITEM = re.compile(r"^- \*\*(?P<said>.+?)\*\*")
VERDICT = re.compile(r", (MET|MISS|UNSTEADY)\b[^,]*$")


def latest() -> dict:
    return json.loads((RESULTS / "latest.json").read_text())


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    rest = text[start + len(heading) + 2:]
    following = re.search(r"^## ", rest, re.MULTILINE)
    return rest[: following.start()] if following else rest


def quoted(target: dict) -> str:
    """How a verdict is quoted: `<target>: <measured>, <verdict>`."""
    return f"{target['target']}: {target['shown']}, {target['verdict']}"


def verdict_lines(text: str) -> list[str]:
    """The bolded list items of "What the numbers say" that end in a verdict."""
    said = section(text, "## What the numbers say")
    items = [m["said"] for line in said.splitlines() if (m := BOLD_ITEM.match(line))]
    return [item for item in items if VERDICT.search(item)]


def test_the_latest_results_section_is_latest_md_as_generated():
    text = PERFORMANCE.read_text()
    latest_section = section(text, "## Latest results")
    assert BEGIN in latest_section and END in latest_section, "the markers are in Latest results"
    quoted = latest_section.split(BEGIN, 1)[1].split(END, 1)[0]
    assert quoted.strip() == (RESULTS / "latest.md").read_text().strip()


def test_every_verdict_quoted_is_the_judged_one():
    judged = {quoted(t) for t in latest()["targets"]}
    lines = verdict_lines(PERFORMANCE.read_text())
    assert lines, "What the numbers say quotes the verdicts"
    for line in lines:
        assert line in judged, f"not a target of latest.json as judged: {line}"


def test_every_target_not_met_is_discussed():
    discussed = set(verdict_lines(PERFORMANCE.read_text()))
    missing = [t["target"] for t in latest()["targets"]
               if not t["verdict"].startswith("MET") and quoted(t) not in discussed]
    assert not missing, f"targets not met and not discussed: {missing}"


def test_the_readme_quotes_the_latest_startup():
    startup = round(latest()["startup"]["startup_ms"])
    said = re.findall(r"starts in about (\d+) ms in the latest benchmark run", README.read_text())
    assert said == [str(startup)], (said, startup)


def test_a_changed_figure_is_caught():
    """The verdict check can fail: a quoted line whose measured value differs is not judged."""
    target = latest()["targets"][0]
    changed = f"{target['target']}: {target['shown']}0, {target['verdict']}"
    assert VERDICT.search(changed)
    assert changed not in {quoted(t) for t in latest()["targets"]}


NEIGHBOURS_BEGIN = "<!-- bench/results/neighbours.md begins: tests/bench/test_docs_figures.py -->"
NEIGHBOURS_END = "<!-- bench/results/neighbours.md ends -->"


def neighbours() -> dict:
    return json.loads((RESULTS / "neighbours.json").read_text())


def test_the_neighbours_section_is_neighbours_md_as_generated():
    text = PERFORMANCE.read_text()
    latest_section = section(text, "## Neighbours: latest results")
    assert NEIGHBOURS_BEGIN in latest_section and NEIGHBOURS_END in latest_section
    quoted = latest_section.split(NEIGHBOURS_BEGIN, 1)[1].split(NEIGHBOURS_END, 1)[0]
    assert quoted.strip() == (RESULTS / "neighbours.md").read_text().strip()
    assert neighbours()["mode"] == "full", "the results recorded are a full run's"


def neighbours_quoted(phase: dict, target: dict) -> str:
    """How a neighbours verdict is quoted: `<phase> — <target>: <shown>, <verdict word>`."""
    word = target["verdict"].split()[0]
    return f"{phase['title']} — {target['target']}: {target['shown']}, {word}"


def test_every_neighbours_target_not_met_is_discussed_with_its_figures():
    said = section(PERFORMANCE.read_text(), "## Neighbours: latest results")
    bold = {m["said"] for line in said.splitlines() if (m := BOLD_ITEM.match(line))}
    missed = [
        neighbours_quoted(phase, target)
        for phase in neighbours()["phases"].values()
        for target in phase["targets"].values()
        if not target["verdict"].startswith("MET")
    ]
    for line in missed:
        assert line in bold, f"not discussed: {line}"
    # And nothing is discussed as missed that the run met.
    for line in bold:
        if " — " in line and VERDICT.search(line):
            assert line in missed, f"discussed but not a miss of the run: {line}"
