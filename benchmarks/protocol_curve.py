"""The learning curve on the field's protocol: Bench2Drive's driving score, success rate and abilities against the share
of a bench2drive preset root's routes a policy trains on, at the preset's fixed budget (docs/training.md "The field's
protocol").

The sizes are holdouts of one collected root (`bin/demo --preset bench2drive`'s DEMO/data): for each of
--test-fractions F, a copy of the root whose frames and cache records are hard links of the original's (the tools
run on the copy, build-buckets, build-cache and train, write only new files renamed into place, so the original's
files are never changed; the copy's buckets are its own), its routes split by `bin/build-buckets --test-fraction F`
(stratified by town, scenario type and weather, as every split: training never reads the test split), then
`bin/train pretrain` and `posttrain` (--preset, --seed) and `bin/evaluate --checkpoint` on the benchmark's routes,
scored by `bin/evaluate score --bench2drive`. --full names evaluation roots of trainings on the root as it is
(bin/demo's seeds, its own split): the curve's largest point.
Every row is read back from what the tools wrote: the evaluation's checkpoint (evaluation.json), that training run's
held-out ADE (summary.json) and root (config.json), the train split of the root's pretrain bucket file.

    .venv/bin/python benchmarks/protocol_curve.py --root DEMO/data --benchmark DEMO/benchmark \\
        --towns .cache/carla-towns [--test-fractions 0.8,0.5] [--full DEMO/eval/policy-seed-0/bench2drive ...] \\
        [--preset bench2drive] [--seed 0] [--workers 2] --out DIR [--png docs/protocol-curve.png]

Prints the table (markdown) and writes the PNG. Rerunning with the same --out resumes: each stage is skipped once
done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_learning_curve import BIN, save_plot, sh  # noqa: E402
from tools.dataset.buckets import load_collection  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402


def hard_linked_copy(root: Path, dest: Path) -> None:
    """`root` at `dest`, every file a hard link of the original's, without its buckets (the copy splits its own)."""
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        shutil.copytree(root, tmp, copy_function=os.link, symlinks=True,
                        ignore=lambda folder, names: ["buckets"] if Path(folder) == root else [])
    except OSError as e:
        raise SystemExit(f"--out {dest.parent}: cannot hard-link {root} there ({e}); put --out on the file system "
                         "of --root") from None
    tmp.rename(dest)


def row(evaluation: Path) -> dict:
    """What one evaluation root says, with its training run's held-out ADE and train split."""
    made = json.loads((evaluation / "evaluation.json").read_text())
    run = Path(made["checkpoint"]).parent.parent  # RUN/checkpoints/step-N
    val = json.loads((run / "summary.json").read_text())["val"]
    layout = Layout(Path(json.loads((run / "config.json").read_text())["root"]))
    train = load_collection(layout, "pretrain", horizon=0, rebuild=False).frames("train")  # (pretrain: no horizon)
    layout_eval = Layout(evaluation)
    merged = json.loads(layout_eval.bench2drive_merged.read_text())
    ability = json.loads(layout_eval.bench2drive_ability.read_text())
    return {"routes": len({run_rel for run_rel, _ in train}), "frames": len(train), "ds": merged["driving score"],
            "success": 100 * merged["success rate"], "ability": 100 * ability["mean"], "ade": val.get("ade"),
            "cv": val.get("ade_constant_velocity")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="the bench2drive preset's collected root (DEMO/data)")
    ap.add_argument("--benchmark", required=True, help="the Bench2Drive route folder driven (DEMO/benchmark)")
    ap.add_argument("--towns", required=True, help="CARLA's towns (.cache/carla-towns)")
    ap.add_argument("--test-fractions", default="0.8,0.5",
                    help="held-out test shares of the root's routes, one training each (default 0.8,0.5)")
    ap.add_argument("--full", action="append", default=[],
                    help="an evaluation root of a training on the whole root (bin/demo's), scored with --bench2drive; "
                         "repeat for its seeds")
    ap.add_argument("--preset", default="bench2drive", help="training preset (default bench2drive)")
    ap.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    ap.add_argument("--workers", type=int, default=2, help="evaluation workers (default 2)")
    ap.add_argument("--out", required=True, help="working folder, on the file system of --root")
    ap.add_argument("--png", default=None, help="where the plot goes (default OUT/protocol-curve.png)")
    args = ap.parse_args()
    root, out = Path(args.root).absolute(), Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    for fraction in sorted(float(f) for f in args.test_fractions.split(",") if f.strip()):
        data, runs, evaluation = out / f"data-{fraction:g}", out / f"runs-{fraction:g}", out / f"eval-{fraction:g}"
        train = [f"preset={args.preset}", f"seed={args.seed}"]
        if not data.exists():
            hard_linked_copy(root, data)
        if not (data / "buckets" / "pretrain.json").is_file():
            sh(BIN / "build-buckets", "--root", data, "--collection", "all", "--test-fraction", fraction)
        sh(BIN / "build-cache", "--root", data)  # the records are there (hard links): nothing to build
        if not (runs / "pretrain" / "summary.json").is_file():
            sh(BIN / "train", "pretrain", f"root={data}", f"logdir={runs / 'pretrain'}", *train)
        if not (runs / "posttrain" / "summary.json").is_file():
            sh(BIN / "train", "posttrain", f"root={data}", f"load={runs / 'pretrain'}", f"logdir={runs / 'posttrain'}",
               *train)
        if not Layout(evaluation).bench2drive_merged.is_file():
            sh(BIN / "evaluate", "--checkpoint", runs / "posttrain", args.benchmark, "--towns", args.towns, "--root",
               evaluation, "--workers", args.workers)
            sh(BIN / "evaluate", "score", "--root", evaluation, "--bench2drive")
        rows.append([row(evaluation)])
    if args.full:
        rows.append([row(Path(e).absolute()) for e in args.full])
    rows.sort(key=lambda group: group[0]["routes"])

    def cell(group: list[dict], key: str) -> str:
        """The group's mean of `key`, then each seed's when there are several."""
        values = [r[key] for r in group if r[key] is not None]
        shown = [f"{v:.3f}" if key in ("ade", "cv") else f"{v:.1f}" for v in [statistics.mean(values), *values]] \
            if values else ["-"]
        return shown[0] if len(values) < 2 else f"{shown[0]} ({' / '.join(shown[1:])})"

    print(f"\nthe field's protocol: {args.preset} preset, trained on a share of {root}'s routes, driven on "
          f"{args.benchmark} (Bench2Drive's metrics; several seeds: their mean, then each)")
    print("| training routes | frames (pretrain train split) | seeds | driving score | success rate (%) "
          "| ability mean (%) "
          "| held-out ADE (own val split, m) | constant velocity ADE (m) |")
    print("|---|---|---|---|---|---|---|---|")
    for group in rows:
        print(f"| {group[0]['routes']} | {group[0]['frames']:,} | {len(group)} | {cell(group, 'ds')} | "
              f"{cell(group, 'success')} | {cell(group, 'ability')} | {cell(group, 'ade')} | {cell(group, 'cv')} |")

    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ns = [group[0]["routes"] for group in rows]
    for key, label in (("ds", "driving score"), ("success", "success rate (%)"), ("ability", "ability mean (%)")):
        means = [statistics.mean(r[key] for r in group) for group in rows]
        line = ax.plot(ns, means, marker="o", label=label)[0]
        for n, group in zip(ns, rows, strict=True):
            if len(group) > 1:
                ax.scatter([n] * len(group), [r[key] for r in group], s=10, color=line.get_color(), alpha=0.5)
    ax.set(xscale="log", xlabel="training routes", ylabel="Bench2Drive-220", ylim=(0, 100),
           title=f"{args.preset} preset, one budget, Bench2Drive's routes")
    ax.minorticks_off()
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.legend(fontsize=7)
    save_plot(fig, Path(args.png) if args.png else out / "protocol-curve.png")


if __name__ == "__main__":
    main()
