"""How much data a policy needs: driving score, route completion and ADE against the number of training routes,
at a fixed training budget.

The real pipeline, each stage its own tool as a user runs it: a town of the embedded world (the demo's), the
largest route set (--sizes' last, `tools.collect routes --seed 0`), collected once and snapshotted as it grows
(the first N route files collected into one root, the root copied, the next files added and the same root
collected again: the runs already driven are skipped, so every smaller root is a prefix of the larger ones);
per size N: buckets, cache, `bin/train pretrain` and `posttrain` with the same preset and --steps (the fixed
budget: the same number of optimizer steps whatever N), then `bin/evaluate --checkpoint` on --eval-routes
routes made for the evaluation (another route seed; none of them trained on), --seeds world seeds each. The
evaluation of the expert on the same routes is the ceiling.

ADE is the post-training run's own held-out figure (summary.json `val.ade`, its buckets' validation split:
frames of the N routes' runs that training did not see), so it is measured on a different set for each N;
the driving score and route completion are measured on the same held-out routes for every N, with 95%
t-intervals over routes x seeds (docs/evaluation.md).

    .venv/bin/python benchmarks/bench_learning_curve.py [--sizes 4,8,16] [--steps 200] [--preset tiny]
        [--eval-routes 4] [--seeds 1] [--workers 2] [--out learning-curve] [--png docs/learning-curve.png]

Prints the table (markdown) and writes the PNG. Rerunning with the same --out resumes: every tool skips
what it has done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.dataset.layout import Layout  # noqa: E402
from tools.dataset.score import mean_interval  # noqa: E402

PYTHON = sys.executable
BIN = REPO / "bin"


def sh(*args: str | Path) -> None:
    """Run one stage as a user would; its output goes to this benchmark's stderr."""
    print("==", " ".join(str(a) for a in args), file=sys.stderr, flush=True)
    subprocess.run([str(a) for a in args], check=True, cwd=REPO, stdout=sys.stderr)


def scores(root: Path) -> dict[str, tuple[float, float | None]]:
    """DS and RC of an evaluation root: mean and half-width of the 95% t-interval over its runs."""
    records = json.loads(Layout(root).evaluation_result.read_text())["_checkpoint"]["records"]
    return {k: mean_interval([r["scores"][k] for r in records]) for k in ("score_composed", "score_route")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4,8,16", help="training route counts, ascending (default 4,8,16)")
    ap.add_argument("--steps", type=int, default=200, help="optimizer steps of each training phase (default 200)")
    ap.add_argument("--preset", default="tiny", help="training and collection preset (default tiny)")
    ap.add_argument("--eval-routes", type=int, default=4, help="held-out routes driven closed loop (default 4)")
    ap.add_argument("--seeds", type=int, default=1, help="world seeds per held-out route (default 1)")
    ap.add_argument("--workers", type=int, default=2, help="collection and evaluation workers (default 2)")
    # Not shorter than the collection's default: at 20 s the expert's waits at long red lights ended as blocked
    # (4 of its 16 runs), and the policy, which runs red lights, scored above its ceiling's route completion.
    ap.add_argument("--blocked-after", type=float, default=90.0,
                    help="seconds standing still that end an evaluated run as blocked (default 90, as collection)")
    ap.add_argument("--out", default="learning-curve", help="working folder (default learning-curve)")
    ap.add_argument("--png", default=None, help="where the plot goes (default OUT/learning-curve.png)")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    out = Path(args.out).absolute()
    routes, pool, eval_routes = out / "routes", out / "route-pool", out / "eval-routes"
    town = routes / "towns" / "town.xodr"
    started = time.time()

    if not town.is_file():
        sh(PYTHON, "-m", "tools.collect", "town", "--out", town)
    if not (pool / ".done").is_file():
        sh(PYTHON, "-m", "tools.collect", "routes", "--town", town, "--preset", args.preset, "--count", sizes[-1],
           "--seed", 0, "--out", pool)
        (pool / ".done").touch()
    if not (eval_routes / ".done").is_file():
        sh(PYTHON, "-m", "tools.collect", "routes", "--town", town, "--preset", args.preset, "--count",
           args.eval_routes, "--seed", 1000, "--out", eval_routes)
        (eval_routes / ".done").touch()
    route_files = sorted(p for p in pool.rglob("*.xml") if "towns" not in p.relative_to(pool).parts)

    if not (out / "eval-expert" / "result.json").is_file():
        sh(BIN / "evaluate", "--agent", "expert", eval_routes, "--root", out / "eval-expert", "--seeds", args.seeds,
           "--workers", args.workers, f"--blocked-after={args.blocked_after}")
    # One root grows; a copy of it is kept at each size (the runs already driven are skipped). Each size is
    # trained and evaluated before the next is collected, so the small sizes' figures come first.
    growing, rows = out / "data", []
    for n in sizes:
        root, runs, evaluated = out / f"data-{n}", out / f"runs-{n}", out / f"eval-{n}"
        if not (root / ".done").is_file():
            for path in route_files[:n]:
                dest = routes / path.relative_to(pool)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if not dest.exists():
                    shutil.copy(path, dest)
            sh(BIN / "collect", routes, "--root", growing, "--preset", args.preset, "--workers", args.workers)
            if root.exists():
                shutil.rmtree(root)
            shutil.copytree(growing, root, symlinks=True)
            (root / ".done").touch()
        train = [f"preset={args.preset}", f"max_steps={args.steps}", f"save_every={args.steps}"]
        sh(BIN / "build-buckets", "--root", root, "--collection", "all")
        sh(BIN / "build-cache", "--root", root)
        if not (runs / "pretrain" / "summary.json").is_file():
            sh(BIN / "train", "pretrain", f"root={root}", f"logdir={runs / 'pretrain'}", *train)
        if not (runs / "posttrain" / "summary.json").is_file():
            sh(BIN / "train", "posttrain", f"root={root}", f"load={runs / 'pretrain'}",
               f"logdir={runs / 'posttrain'}", *train)
        val = json.loads((runs / "posttrain" / "summary.json").read_text())["val"]
        if not (evaluated / "result.json").is_file() or json.loads(
                (evaluated / "result.json").read_text())["entry_status"] != "Finished":
            sh(BIN / "evaluate", "--checkpoint", runs / "posttrain", eval_routes, "--root", evaluated, "--seeds",
               args.seeds, "--workers", args.workers, f"--blocked-after={args.blocked_after}")
        rows.append((n, scores(evaluated), val.get("ade"), val.get("ade_constant_velocity")))
        print(f"learning curve: {n} routes: DS {rows[-1][1]['score_composed'][0]:.1f}, RC "
              f"{rows[-1][1]['score_route'][0]:.1f}, ADE {val.get('ade')}", file=sys.stderr, flush=True)

    expert = scores(out / "eval-expert")

    def cell(mean_half: tuple[float, float | None]) -> str:
        mean, half = mean_half
        return f"{mean:.1f} ± {half:.1f}" if half is not None else f"{mean:.1f}"

    n_eval = args.eval_routes * args.seeds
    print(f"\nlearning curve: {args.preset} preset, {args.steps} steps per phase, closed loop on {args.eval_routes} "
          f"held-out routes x {args.seeds} seeds ({n_eval} runs; ± is the 95% t-interval), "
          f"{(time.time() - started) / 60:.0f} min")
    print("| training routes | driving score | route completion | held-out ADE (own val split) "
          "| constant velocity ADE |")
    print("|---|---|---|---|---|")
    for n, s, ade, cv in rows:
        ade_s = f"{ade:.3f} m" if ade is not None else "-"
        cv_s = f"{cv:.3f} m" if cv is not None else "-"
        print(f"| {n} | {cell(s['score_composed'])} | {cell(s['score_route'])} | {ade_s} | {cv_s} |")
    print(f"| expert | {cell(expert['score_composed'])} | {cell(expert['score_route'])} | - | - |")

    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    ns = [r[0] for r in rows]
    for ax, key, label in ((axes[0], "score_composed", "driving score"), (axes[0], "score_route", "route completion")):
        means = [r[1][key][0] for r in rows]
        halves = [r[1][key][1] or 0.0 for r in rows]
        ax.errorbar(ns, means, yerr=halves, marker="o", capsize=3, label=label)
        ax.axhline(expert[key][0], linestyle=":", color=ax.lines[-1].get_color(), label=f"expert {label}")
    axes[0].set(xscale="log", xlabel="training routes", ylabel="score (95% interval)", ylim=(-5, 105),
                title="closed loop, held-out routes")
    for ax in axes:
        ax.minorticks_off()
    axes[0].set_xticks(ns, [str(n) for n in ns])
    axes[0].legend(fontsize=7)
    ades = [(r[0], r[2]) for r in rows if r[2] is not None]
    if ades:
        axes[1].plot([a[0] for a in ades], [a[1] for a in ades], marker="o", label="planner")
        axes[1].plot([r[0] for r in rows if r[3] is not None], [r[3] for r in rows if r[3] is not None],
                     marker="x", linestyle="--", label="constant velocity")
    axes[1].set(xscale="log", xlabel="training routes", ylabel="ADE (m)", title="held-out ADE (own val split)")
    axes[1].set_xticks(ns, [str(n) for n in ns])
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{args.preset} preset, {args.steps} steps per phase", fontsize=9)
    save_plot(fig, Path(args.png) if args.png else out / "learning-curve.png")


def save_plot(fig: Any, png: Path) -> None:
    """Write the matplotlib figure `fig` to `png` (its folder made) and say where."""
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
