"""Runs the real Helm 3 binary on the chart: `helm lint --strict` and `helm template`.

scripts/test installs Helm into .tools/bin (ensure_helm in scripts/lib.sh); $HELM or a helm on
PATH is used otherwise. Without one, every test that needs it fails (nothing is skipped).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "q-a2a-gateway"
TOOLS_BIN = ROOT / ".tools" / "bin"
RELEASE = "q"
NAMESPACE = "q-system"
# The Kubernetes version the objects are validated against (kubernetes-validate's schemas).
K8S_VERSION = "1.30.0"


def tool(name: str) -> str:
    """A project-installed tool (.tools/bin), else $NAME or PATH; fails when there is none."""
    found = (
        shutil.which(name, path=str(TOOLS_BIN))
        or os.environ.get(name.upper())
        or shutil.which(name)
    )
    if not found:
        pytest.fail(
            f"{name} not found: run scripts/test, or `bash -c 'source scripts/lib.sh; "
            f"ensure_{name}'` to install it into .tools/bin",
            pytrace=False,
        )
    return found


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=False)


def deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def values(overrides: dict) -> dict:
    """values.yaml with `overrides` merged in, as Helm merges a -f file."""
    return deep_merge(yaml.safe_load((CHART / "values.yaml").read_text()), overrides)


def _with_values_file(overrides: dict, args: list[str]) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        json.dump(overrides, f)  # JSON is YAML
        f.flush()
        return run(args + ["--values", f.name])


def lint(overrides: dict) -> subprocess.CompletedProcess:
    return _with_values_file(
        overrides, [tool("helm"), "lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    )


def template_raw(overrides: dict) -> subprocess.CompletedProcess:
    return _with_values_file(
        overrides,
        [
            tool("helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            K8S_VERSION,
        ],
    )


SOURCE = re.compile(r"^# Source: [^/]+/templates/(\S+)$", re.M)


def split_documents(text: str) -> list[tuple[str, dict]]:
    """Helm's output as (template file name, object) pairs, from its `# Source:` comments."""
    out = []
    for chunk in re.split(r"^---\s*$", text, flags=re.M):
        doc = yaml.safe_load(chunk)
        if doc is None:
            continue
        source = SOURCE.search(chunk)
        assert source, f"a rendered document without its # Source line:\n{chunk[:300]}"
        out.append((source.group(1), doc))
    return out


@functools.cache
def _template_json(overrides_json: str) -> list[tuple[str, dict]]:
    result = template_raw(json.loads(overrides_json))
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return split_documents(result.stdout)


def template(overrides: dict) -> list[tuple[str, dict]]:
    """Every object `helm template` renders for values.yaml + `overrides` (cached per values)."""
    import copy

    return copy.deepcopy(_template_json(json.dumps(overrides, sort_keys=True)))
