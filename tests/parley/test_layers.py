"""The layers of docs/layers.md are import-linter contracts in pyproject.toml, run by `make lint`:
the tree keeps them, and each fails on an import that breaks it, naming the contract."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` run in ``where`` on the pyproject.toml there, importing the packages there."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=where,
        env={**os.environ, "PYTHONPATH": str(where)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    linted = lint_imports(ROOT)

    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in linted.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract", "named"),
    [
        pytest.param(
            "agents/breach.py",
            "from negotiations import models\n",
            "layers",
            "agents.breach -> negotiations.models",
            id="agents-imports-negotiations",
        ),
        pytest.param(
            "parley/breach.py",
            "from agents import selectors\n",
            "layers",
            "parley.breach -> agents.selectors",
            id="parley-imports-agents",
        ),
        pytest.param(
            "mcp_gateway/breach.py",
            "from a2a_gateway import auth\n",
            "layers",
            "mcp_gateway.breach -> a2a_gateway.auth",
            id="one-edge-imports-another",
        ),
        pytest.param(
            "negotiations/breach.py",
            "from agents.views import InboxView\n",
            "views",
            "negotiations.breach -> agents.views",
            id="a-view-imported-outside-urls",
        ),
        pytest.param(
            "agents/tools.py",
            "from agents import services\n",
            "tools",
            "agents.tools -> agents.services",
            id="the-tool-registry-imports-its-caller",
        ),
    ],
)
def test_an_import_that_breaks_a_contract_fails_naming_it(
    tmp_path: Path, module: str, line: str, contract: str, named: str
) -> None:
    """A copy of the apps with the one import added, linted with the same contracts: the one
    ``contract`` (its id) breaks, and the output names the import."""
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / module).open("a") as source:
        source.write(line)

    linted = lint_imports(tmp_path)

    assert linted.returncode == 1, linted.stdout + linted.stderr
    name = next(c["name"] for c in CONFIG["contracts"] if c["id"] == contract)
    assert f"{name} BROKEN" in linted.stdout
    assert ", 1 broken." in linted.stdout
    assert named in linted.stdout
