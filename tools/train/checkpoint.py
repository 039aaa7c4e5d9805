"""Step checkpoints: `LOGDIR/checkpoints/step-00000042/`, written atomically, the newest `keep` kept.

One checkpoint folder holds

    model.pt       the model's state_dict (without a DDP wrapper's "module." prefix)
    optimizer.pt   the optimizer's state_dict
    state.pt       LR scheduler, grad scaler (when one is used), RNG states (python, numpy, torch, cuda),
                   the loop state (step, epoch, position in the epoch, counters) and the model architecture
    config.json    the resolved TrainConfig of the run that wrote it
    COMPLETE       written last: {"step", "sha256": {file: digest}}; a folder without it is ignored

The folder is assembled under a `.tmp-` name beside its final place and renamed into place, so a
reader sees a complete checkpoint or none. The marker records a SHA-256 of every file: `latest` checks
them and falls back to the newest intact checkpoint with one warning line when a file was damaged
afterwards (a flipped byte, a truncated copy). A resume (`find_resume`) takes the newest intact checkpoint;
when none is intact but one has only its optimizer.pt damaged, it resumes that one's model, schedule, RNG and
data position with new optimizer moments, and says so in one line; when none can be resumed it stops in one
line naming them. `purge` counts only intact checkpoints towards `keep`: it never deletes an intact checkpoint
to keep a damaged one. Everything is saved with `torch.save` of tensors and plain containers and loaded with
`torch.load(weights_only=True)`: a checkpoint cannot run code on the reader.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools.core import atomic, files, locks
from tools.core.errors import ToolError

CHECKPOINTS = "checkpoints"
STEP_DIR = "step-{step:08d}"
MARKER = "COMPLETE"
_STEP_RE = re.compile(r"^step-(\d{8})$")
PARTS = ("model.pt", "optimizer.pt", "state.pt", "config.json")
#: The part a resume can do without: AdamW's running averages start over (`find_resume`).
OPTIMIZER = "optimizer.pt"


#: LOGDIR/train.lock: locked (flock) by the training process that writes the run folder (rank 0), for its life.
RUN_LOCK = "train.lock"
_held: dict[Path, int] = {}  # run folders this process holds the lock of
#: Checkpoints this process knows to be intact (True: it wrote them, or checked them) or damaged (False):
#: `purge` counts the intact ones without hashing them again at every save.
_intact: dict[Path, bool] = {}


def lock_run_folder(logdir: Path) -> None:
    """Hold LOGDIR's lock until this process ends: ToolError when another training holds it (two trainings in one
    run folder would write over each other's step folders) or when the file system has no locks. A folder that
    does not exist yet is not created here (a refused run leaves nothing): `loop.open_run_folder` locks it when it
    creates it, before its first write."""
    logdir = Path(logdir)
    if logdir in _held or not logdir.is_dir():
        return
    fd = locks.hold(logdir / RUN_LOCK)
    if fd is None:
        raise ToolError(f"logdir {logdir}: another training runs in it (its lock {logdir / RUN_LOCK} is held); wait "
                        "for it to end, or give another --logdir=")
    _held[logdir] = fd


class CheckpointError(ToolError):
    """A checkpoint whose files do not match the checksums in its marker, or do not load."""


def step_dir(logdir: Path, step: int) -> Path:
    return Path(logdir) / CHECKPOINTS / STEP_DIR.format(step=step)


def complete_checkpoints(folder: Path) -> list[Path]:
    """Complete step folders under `folder` (a run folder or its checkpoints/), oldest first."""
    folder = Path(folder)
    if (folder / CHECKPOINTS).is_dir():
        folder = folder / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP_RE.match(p.name) and (p / MARKER).is_file()]
    return sorted(found, key=lambda p: int(_STEP_RE.match(p.name).group(1)))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with files.open_regular(path, None) as f:  # a FIFO or a device in place of a part: refused, not waited on
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def damaged_parts(path: Path) -> dict[str, str]:
    """The files of a complete checkpoint that do not match the checksums in its marker, each with what is wrong
    ({} when intact; an unreadable marker: {MARKER: why}). Remembered for `purge`."""
    path = Path(path)
    try:
        marker = files.read_json(path / MARKER)
        sums = marker["sha256"]
        if not isinstance(sums, dict) or set(sums) != set(PARTS):
            raise ValueError("no checksum of every part")
    except (OSError, ValueError, KeyError, TypeError) as e:
        bad = {MARKER: f"unreadable completion marker ({e})"}
    else:
        bad = {}
        for name in PARTS:
            try:
                if _sha256(path / name) != sums[name]:
                    bad[name] = "checksum mismatch (damaged since it was written)"
            except files.UnreadableFile as e:
                bad[name] = str(e).removeprefix(f"{path / name}: ")
            except OSError as e:
                bad[name] = f"unreadable ({e.strerror})"
    _intact[path] = not bad
    return bad


def _first_damage(path: Path, bad: dict[str, str]) -> str:
    name, why = next(iter(bad.items()))
    return f"{path / name}: {why}"


def verify(path: Path) -> None:
    """Check a complete checkpoint's files against the checksums in its marker; CheckpointError if not."""
    bad = damaged_parts(path)
    if bad:
        raise CheckpointError(_first_damage(Path(path), bad))


def latest(folder: Path) -> Path | None:
    """The newest intact checkpoint under a run folder or checkpoints/ folder, or None. A damaged newer one
    is skipped with one warning line on stderr (its checksums do not match)."""
    for path in reversed(complete_checkpoints(folder)):
        try:
            verify(path)
            return path
        except CheckpointError as e:
            print(f"train: warning: {e}; falling back to an older checkpoint", file=sys.stderr)
    return None


@dataclass
class Resume:
    """What a run folder resumes from (`find_resume`): `path` None for a folder without checkpoints; `optimizer`
    False when its optimizer.pt is damaged and the optimizer's moments start over; `warnings`, one line each."""

    path: Path | None
    optimizer: bool = True
    warnings: list[str] = field(default_factory=list)


def find_resume(logdir: Path) -> Resume:
    """The checkpoint a rerun in `logdir` resumes: the newest intact one (as `latest`); else, when none is intact,
    the newest whose only damaged part is its optimizer.pt, resumed with new optimizer moments (its weights, schedule,
    RNG and data position are kept, not thrown away); else, for a folder that has checkpoints, CheckpointError in
    one line naming them and how to start over on purpose: never a silent start from step 0. The warnings name the
    damaged checkpoints newer than the one taken."""
    logdir = Path(logdir)
    found = list(reversed(complete_checkpoints(logdir)))  # newest first
    damaged: dict[Path, dict[str, str]] = {}

    def skipped(newer: list[Path]) -> list[str]:
        return [f"{_first_damage(p, damaged[p])}; falling back to an older checkpoint" for p in newer]

    for i, path in enumerate(found):  # hashed newest first, up to the first intact one
        damaged[path] = damaged_parts(path)
        if not damaged[path]:
            return Resume(path, True, skipped(found[:i]))
    for i, path in enumerate(found):
        if set(damaged[path]) == {OPTIMIZER}:
            return Resume(path, False, [*skipped(found[:i]), (
                f"{_first_damage(path, damaged[path])}, and no checkpoint of {logdir} is intact: resuming "
                f"{path.name} from its intact model.pt, state.pt and config.json (weights, schedule, RNG, data "
                "position) with new optimizer moments (AdamW's running averages start over; the loss curve will "
                "not match an uninterrupted run)")])
    if not found:
        return Resume(None)
    shown = "; ".join(f"{p.name} " + ", ".join(f"{name} {why}" for name, why in bad.items())
                      for p, bad in damaged.items())
    folder = found[0].parent
    raise CheckpointError(f"logdir {logdir}: none of its {len(found)} checkpoints can be resumed ({shown}); to "
                          f"start over from step 0 on purpose, move them aside (mv {folder} {folder}.damaged) or "
                          "give a new --logdir=")


def resolve(path: Path) -> Path | None:
    """A step folder itself when complete (CheckpointError when damaged), else the newest intact one
    under it."""
    path = Path(path)
    if (path / MARKER).is_file():
        verify(path)
        return path
    return latest(path)


def rng_state() -> dict[str, Any]:
    """Every RNG the training touches, as tensors and plain values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


class _Keeping:
    """The file torch.save writes through, keeping the OSError of a failed write: torch turns it into a
    RuntimeError without its errno ("unexpected pos"), and a full disk must stay an ENOSPC."""

    def __init__(self, f: Any):
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _save(obj: Any, path: Path) -> None:
    with open(path, "xb") as f:  # a new file in a new folder: never through a link planted there
        out = _Keeping(f)
        try:
            torch.save(obj, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise
        f.flush()
        os.fsync(f.fileno())


def tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in nested dicts, lists and tuples: about what torch.save writes of them."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def save(logdir: Path, step: int, model: dict, optimizer: dict, state: dict[str, Any], config: dict[str, Any],
         keep: int) -> Path:
    """Write checkpoint `step` atomically, then delete all but the newest `keep` complete ones."""
    final = step_dir(logdir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{atomic.TMP_PREFIX}{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _save(model, tmp / "model.pt")
        _save(optimizer, tmp / "optimizer.pt")
        _save(state, tmp / "state.pt")
        atomic.write_json(tmp / "config.json", config)
        atomic.write_json(tmp / MARKER, {"step": int(step), "sha256": {name: _sha256(tmp / name) for name in PARTS}})
        if final.exists():  # the same step saved again (a rerun that stopped at the same step): replace it
            atomic.remove_tree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(final.parent)
    _intact[final] = True
    purge(logdir, keep)
    return final


def purge(logdir: Path, keep: int) -> list[Path]:
    """Delete every complete checkpoint older than the `keep`-th newest intact one, and leftovers of interrupted
    writes. Damaged checkpoints never count towards `keep`: an intact checkpoint is never deleted to keep a damaged
    one (damaged ones newer than the oldest kept go when enough intact ones are newer than them)."""
    folder = Path(logdir) / CHECKPOINTS
    found = complete_checkpoints(folder)
    intact = 0
    removed: list[Path] = []
    for i in range(len(found) - 1, -1, -1):
        path = found[i]
        if path not in _intact:
            damaged_parts(path)
        intact += _intact[path]
        if intact == keep:
            removed = found[:i]
            break
    for path in removed:
        _intact.pop(path, None)
        try:
            atomic.remove_tree(path)
        except FileNotFoundError:  # removed meanwhile (by hand): nothing left to do
            pass
    for path in folder.iterdir():
        if atomic.is_temporary(path) and not path.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(path, ignore_errors=True)  # a writer that died mid-save (only rank 0 saves)
    return removed


def load(path: Path, optimizer: bool = True) -> dict[str, Any]:
    """A checkpoint's parts: model, optimizer (None without `optimizer`: a resume whose optimizer.pt is damaged),
    state (tensors and plain containers) and config (a dict)."""
    path = Path(path)

    return {"path": path, "model": _part(path, "model.pt"),
            "optimizer": _part(path, OPTIMIZER) if optimizer else None,
            "state": _part(path, "state.pt"), "config": _part(path, "config.json")}


def load_model_only(path: Path) -> dict[str, Any]:
    """The model weights, architecture and config of a checkpoint (posttrain starting from pretrain)."""
    path = Path(path)
    state = _part(path, "state.pt")
    return {"path": path, "model": _part(path, "model.pt"), "model_config": state["model_config"],
            "loop": state["loop"], "config": _part(path, "config.json")}


def _part(path: Path, name: str) -> Any:
    """One file of a checkpoint; CheckpointError (one line) when it does not load."""
    try:
        if name.endswith(".json"):
            return files.read_json(path / name)
        with files.open_regular(path / name, None) as f:  # (never waits on a FIFO planted there)
            return torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ... for a damaged file
        raise CheckpointError(f"{path / name}: does not load ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                              ) from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
