"""The TCK gate's own rules (tests/tck/report.py), without the kit: an expected failure counts
only for the reason its entry states, and a kit bug that passes fails the gate."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

# report.py reads the kit's requirement registry at import; a stand-in with two requirements.
registry = types.ModuleType("tck.requirements.registry")


class _Level:
    def __init__(self, value):
        self.value = value


class _Spec:
    def __init__(self, rid):
        self.id, self.level, self.title, self.section = rid, _Level("MUST"), rid, "1"


registry.ALL_REQUIREMENTS = [_Spec("REQ-A"), _Spec("REQ-B")]
for name in ("tck", "tck.requirements"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["tck.requirements.registry"] = registry
sys.path.insert(0, str(Path(__file__).parent))
import report  # noqa: E402


def merged(status: str, errors: list[str]) -> dict:
    return {"level": "MUST", "status": status, "errors": errors, "tests": [], "transports": {"jsonrpc"}}


def entry(category: str = "profile", pattern: str = "messageId was already used") -> dict:
    return {"category": category, "reason": "why", "proof": "x::y", "match_re": re.compile(pattern)}


def test_an_expected_failure_counts_only_for_its_own_reason():
    expected = {"REQ-A": entry()}
    same = report.classify({"REQ-A": merged("FAIL", ["[run] this messageId was already used with other content"])}, expected)
    assert same["REQ-A"]["outcome"].startswith("expected failure")
    other = report.classify({"REQ-A": merged("FAIL", ["[run] Expected error code -32001, got -32603"])}, expected)
    assert other["REQ-A"]["outcome"] == "FAIL"
    assert "another reason" in other["REQ-A"]["why"]
    # One error of several for another reason is enough to fail it.
    mixed = report.classify({"REQ-A": merged("FAIL", ["[a] messageId was already used", "[b] timed out"])}, expected)
    assert mixed["REQ-A"]["outcome"] == "FAIL"


def test_an_unlisted_failure_fails():
    rows = report.classify({"REQ-B": merged("FAIL", ["[run] boom"])}, {})
    assert rows["REQ-B"]["outcome"] == "FAIL"


def test_a_kit_bug_that_passes_fails_the_gate(tmp_path, monkeypatch, capsys):
    toml = tmp_path / "expected.toml"
    toml.write_text(
        '[[expected]]\nid = "REQ-A"\ncategory = "kit"\nreason = "the kit is wrong"\n'
        "match = '''anything'''\nproof = \"send_and_get::the_test\"\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.rs").write_text("async fn the_test() {}\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "compatibility.json").write_text(
        '{"per_requirement": {"REQ-A": {"level": "MUST", "status": "PASS"}}}'
    )
    monkeypatch.setattr(sys, "argv", [
        "report.py", "--expected", str(toml), "--root", str(tmp_path),
        "--out", str(tmp_path / "out"), "--run", f"complete=ag-writer={run}",
    ])
    assert report.main() == 1
    assert "listed as a kit bug" in capsys.readouterr().out


def test_a_change_to_the_skipped_or_untested_musts_fails_the_gate():
    rows = {
        "REQ-A": {"level": "MUST", "outcome": "not applicable"},
        "REQ-B": {"level": "MUST", "outcome": "not tested"},
    }
    pinned = {"not applicable": {"REQ-A"}, "not tested": {"REQ-B"}}
    assert report.pinned_problems(rows, pinned, "x.toml") == []
    # One more skipped than pinned, one pinned that is tested now: both fail.
    rows["REQ-B"]["outcome"] = "pass"
    rows["REQ-C"] = {"level": "MUST", "outcome": "not applicable"}
    problems = report.pinned_problems(rows, pinned, "x.toml")
    assert any("REQ-C is not applicable now" in p for p in problems), problems
    assert any("REQ-B is listed in x.toml [pinned] untested but is pass now" in p for p in problems), problems
    # A SHOULD skipped is not pinned.
    rows = {"REQ-A": {"level": "SHOULD", "outcome": "not applicable"}}
    assert report.pinned_problems(rows, {"not applicable": set(), "not tested": set()}, "x.toml") == []
