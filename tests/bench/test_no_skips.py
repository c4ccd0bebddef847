"""tests/pytest_plugins/no_skips.py, which scripts/test loads into every pytest suite: a skipped
test fails the run, and a run with nothing skipped passes."""

import os
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "pytest_plugins"


def run_pytest(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=str(PLUGINS))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no_skips", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def test_a_skipped_test_fails_the_run(tmp_path):
    done = run_pytest(tmp_path, "import pytest\n\ndef test_ran():\n    pass\n\n"
                                "@pytest.mark.skip(reason='cannot run here')\n"
                                "def test_skipped():\n    pass\n")
    assert done.returncode == 1, done.stdout
    assert "1 test(s) skipped, which fails the run" in done.stdout


def test_a_run_with_nothing_skipped_passes(tmp_path):
    done = run_pytest(tmp_path, "def test_ran():\n    pass\n")
    assert done.returncode == 0, done.stdout
