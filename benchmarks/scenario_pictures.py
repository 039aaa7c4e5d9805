"""The pictures of docs/scenarios.md: one recorded frame per scenario type, as `show` draws it.

Takes the routes a bench_scenarios run kept (--routes: its OUT/routes folder), drives one route per type with
frames (a real town's first, else a generated one's; one whose expert run finished, when the bench's root is
given with --results), and writes `show --frame scenario` (the frame with the scenario's actors about 12 m
ahead) of each as OUT/<Type>.jpg, 1152 pixels wide.

    .venv/bin/python benchmarks/bench_scenarios.py --routes-per-type 2 --out /tmp/bench-scenarios
    .venv/bin/python benchmarks/scenario_pictures.py --routes /tmp/bench-scenarios/routes \\
        --results /tmp/bench-scenarios/expert --out docs/scenarios
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.collect.base.scenario_types import PLACEABLE  # noqa: E402

WIDTH = 1152


def finished(results: Path | None, route: Path) -> bool:
    """Whether the bench's expert run of this route file finished (True when no results are given)."""
    if results is None:
        return True
    for path in (results / "results" / route.parent.name).glob(f"{route.stem}_*.json"):
        status = json.loads(path.read_text())["_checkpoint"]["records"][0]["status"]
        return status in ("Perfect", "Completed")
    return False


def main() -> None:
    from PIL import Image

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", type=Path, required=True, help="the routes folder of a bench_scenarios --out")
    parser.add_argument("--results", type=Path, default=None, help="its expert root: pick routes that finished")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "scenarios")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scenario-pictures-") as tmp:
        for name in PLACEABLE:
            candidates = [p for group in ("real", "generated")
                          for p in sorted((args.routes / group / name).glob("*.xml"))]
            png = Path(tmp) / f"{name}.png"
            route = None
            for candidate in (p for p in candidates if finished(args.results, p)):
                root = Path(tmp) / name / candidate.stem
                subprocess.run([sys.executable, "-m", "tools.collect", "run", "--route", str(candidate), "--root",
                                str(root)], cwd=REPO, check=True, capture_output=True)
                run = next((root / "data" / name).iterdir())
                shown = subprocess.run([sys.executable, "-m", "tools.collect", "show", str(run), "--frame", "scenario",
                                        "--out", str(png)], cwd=REPO, capture_output=True, text=True)
                if shown.returncode == 0:
                    route = candidate
                    break
                print(f"{name}: {candidate.name}: {shown.stderr.strip()}", flush=True)  # its scenario had no site
            if route is None:
                print(f"{name}: no route", flush=True)
                continue
            image = Image.open(png).convert("RGB")
            image = image.resize((WIDTH, round(image.height * WIDTH / image.width)), Image.Resampling.LANCZOS)
            image.save(args.out / f"{name}.jpg", quality=80, optimize=True)
            print(f"{name}: {route.relative_to(args.routes)} -> {args.out / (name + '.jpg')}", flush=True)


if __name__ == "__main__":
    main()
