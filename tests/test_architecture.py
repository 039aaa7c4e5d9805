"""The layers of docs/architecture.md hold: the import rules (import-linter contracts in pyproject.toml, function-local
imports included), collection without torch, and no package holding most of the code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import PYTHON, REPO, run_tool

#: No top-level package of tools/ may hold more than this share of its lines (issue: one room for everything).
MAX_PACKAGE_SHARE = 0.30


def test_every_import_rule_of_the_architecture_is_kept():
    lint = Path(PYTHON).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout or "broken" not in proc.stdout.split("Contracts:")[-1]


def test_collection_and_its_cli_load_without_torch_training_or_evaluation():
    """The CARLA image has no torch: every module under tools/collect imports without it."""
    code = ("import pkgutil, importlib, sys, tools.collect\n"
            "for m in pkgutil.walk_packages(tools.collect.__path__, 'tools.collect.'):\n"
            "    if not m.name.endswith('drivekit_agent'):\n"
            "        importlib.import_module(m.name)\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] == 'torch' or n.startswith(('tools.train', "
            "'tools.evaluate')))\n"
            "assert not bad, bad\n")
    proc = run_tool(PYTHON, "-c", code)
    assert proc.returncode == 0, proc.stderr


def test_core_imports_only_the_standard_library_and_core():
    """tools/core (command line, options, errors, presets, atomic files, locks, bounded reads, SLURM job states) is the
    base every package may import: it imports nothing of ours but itself, and of the third-party packages only fire
    (the command line)."""
    outside = set()
    for path in (REPO / "tools" / "core").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
        outside |= {f"{path.name}: {m}" for m in imported if m.split(".")[0] not in sys.stdlib_module_names
                    and not m.startswith("tools.core") and m != "fire"}
    assert not outside, sorted(outside)


def test_no_package_holds_more_than_30_percent_of_the_lines_of_tools():
    lines: dict[str, int] = {}
    for path in (REPO / "tools").rglob("*.py"):
        parts = path.relative_to(REPO / "tools").parts
        package = parts[0] if len(parts) > 1 else "."
        if package == "collect" and len(parts) > 2:  # collect's subpackages are packages of their own
            package = f"collect/{parts[1]}"
        lines[package] = lines.get(package, 0) + len(path.read_text().splitlines())
    total = sum(lines.values())
    worst = max(lines, key=lines.get)
    assert lines[worst] / total <= MAX_PACKAGE_SHARE, (worst, lines[worst], total, sys.version)
