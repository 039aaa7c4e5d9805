"""What the training loop reads: batches of cached samples, in the collection's epoch order.

After the cache is built, training reads only the bucket files (which samples, in which order) and the
cache records (the samples). The order of epoch `e` is `Collection.epoch_samples("train", e, seed)`, a
pure function of the bucket files, so a resumed run that knows (epoch, samples consumed in the epoch)
continues with exactly the batches the interrupted run would have seen. Under DDP the global batch is
split by rank: rank r takes the samples r, r + world, r + 2 world, ... of the epoch's order.

Every record read is checked to be the sample asked for: its checksum, the frame it names (its run and index:
a record copied, swapped or renamed is refused), the recorded attempt of its run and, where the run's measurements
index lists them, the fingerprint of its frame (tools.dataset.cache). A cache of an older format names no frame: it
is read with that unverified, said once.

A damaged (or misplaced, or stale) record met during an epoch is reported in one warning line, rebuilt from the
dataset in a subprocess and read again; when that fails too, the sample is replaced by the next one of the epoch
and counted. An epoch never stops in the middle because of one bad file.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tools.core.errors import ToolError
from tools.dataset.cache import (
    CACHE_FORMAT,
    CacheRecordError,
    SessionCache,
    cache_format,
    decode_record,
    older_cache_line,
    read_cache_settings,
    read_record_bytes,
    read_run_fingerprint,
    readable_cache_dir,
    rebuild_record,
    record_path,
    record_run,
    run_key,
)
from tools.dataset.frames import read_run_fingerprints
from tools.dataset.layout import Layout
from tools.dataset.samples import CacheSettings

#: The sample keys a batch holds (boxes vary in count per frame and no head uses them yet), and those a cache of an
#: older format lacks (overtake_offset: format 4 on), which a batch holds when its samples do.
BATCH_KEYS = ("rgb", "semantics", "depth", "lidar_bev", "bev", "waypoints", "waypoints_valid", "route",
              "target_point", "command", "speed", "target_speed", "light_hazard")
NEWER_BATCH_KEYS = ("overtake_offset",)

#: Consecutive unusable samples after which the cache is considered broken, not merely damaged.
MAX_REPLACEMENTS = 16

Item = tuple[str, int]  # (run_rel "data/<Scenario>/<run>", frame index)


def warn(message: str) -> None:
    print(f"train: warning: {message}", file=sys.stderr, flush=True)


def find_cache(layout: Layout) -> tuple[Path, CacheSettings]:
    """The cache folder to train from: the one of the default CacheSettings (of this format, else of an older
    readable one), else the only one there is."""
    default = readable_cache_dir(layout, CacheSettings())
    if default.is_dir():
        return default, read_cache_settings(default)
    others = sorted(p for p in layout.cache.glob("*") if p.is_dir() and not p.name.startswith("."))
    if len(others) == 1:
        return others[0], read_cache_settings(others[0])
    if not others:
        raise ToolError(f"no cache under {layout.cache}: run bin/build-cache --root {layout.root}")
    raise ToolError(f"{layout.cache} holds {len(others)} caches and none of the default settings "
                    f"({default.name}): rebuild the default one with bin/build-cache --root {layout.root}")


def run_fingerprints(layout: Layout, items: Sequence[Item]) -> dict[str, str]:
    """The recorded attempt (tools.dataset.cache.run_fingerprint) of every run `items` name: what their records
    must have been made from. ToolError naming a run whose run.json cannot be read."""
    out = {}
    for run in sorted({run for run, _ in items}):
        try:
            out[run] = read_run_fingerprint(layout, run_key(run))
        except OSError as e:
            raise ToolError(f"{layout.root / run}: cannot read its run.json ({e}); collect the run again "
                            "(bin/collect) or rebuild the buckets without it (bin/build-buckets --force)") from None
    return out


def frame_fingerprints(layout: Layout, items: Sequence[Item]) -> dict[str, list[int]]:
    """The fingerprint of every frame of the runs `items` name, as each run's measurements index lists them (read
    from the start of the file); a run whose index lists none (recorded before dataset format 6) is left out, and
    its records' frames are not compared."""
    out = {}
    for run in sorted({run for run, _ in items}):
        listed = read_run_fingerprints(layout.run_measurements(run_key(run)))
        if listed is not None:
            out[run] = listed
    return out


def check_cache_complete(cache_root: Path, layout: Layout, items: Sequence[Item],
                         fingerprints: dict[str, str]) -> None:
    """Every record the collection names exists, and the first record of each run was made from the run's
    recorded attempt on disk now; else one line saying how many are missing or stale, and the fix. A cache of an
    older format is said once (its records' place is unverified)."""
    fmt = cache_format(cache_root)
    if fmt != CACHE_FORMAT:
        warn(older_cache_line(cache_root))
    missing = sum(1 for run, index in items if not record_path(cache_root, run, index).is_file())
    if missing:
        raise ToolError(f"cache {cache_root} lacks {missing} of {len(items)} samples: run bin/build-cache "
                        f"--root {layout.root}")
    first: dict[str, int] = {}
    for run, index in items:
        first[run] = min(index, first.get(run, index))
    stale = [run for run, index in sorted(first.items())
             if record_run(record_path(cache_root, run, index), fmt) != fingerprints.get(run)]
    if stale:
        raise ToolError(f"cache {cache_root} holds records of {len(stale)} route runs made from an earlier recording "
                        f"of the run (recorded again since; {stale[0]} ...): run bin/build-cache --root "
                        f"{layout.root}, which rebuilds them")


class RecordDataset(Dataset):
    """Samples of a fixed list of (run, index), read from the cache records (through a session cache)."""

    def __init__(self, items: Sequence[Item], root: Path, cache_root: Path, settings: CacheSettings,
                 session: SessionCache | None = None, fingerprints: dict[str, str] | None = None,
                 frames: dict[str, list[int]] | None = None):
        self.items = list(items)
        self.root, self.cache_root, self.settings, self.session = root, cache_root, settings, session
        #: run -> the recorded attempt its records must come from (a stale record is rebuilt like a damaged one)
        self.fingerprints = fingerprints or {}
        #: run -> its frames' fingerprints (frame_fingerprints): a record made from another frame is stale
        self.frames = frames or {}
        self.cache_format = cache_format(cache_root)

    def __len__(self) -> int:
        return len(self.items)

    def _bytes(self, path: Path) -> bytes:
        if self.session is None:
            return read_record_bytes(path)
        key = str(path.relative_to(self.cache_root))
        data = self.session.get(key)
        if data is None:
            data = read_record_bytes(path)
            self.session.set(key, data)
        return data

    def _read(self, item: Item) -> tuple[dict[str, Any] | None, int]:
        """(sample or None, records rebuilt). A bad record is reported, rebuilt and read once more."""
        run, index = item
        path = record_path(self.cache_root, run, index)
        listed = self.frames.get(run)
        # what the record must have been made from: this frame of this run (a record of another place is
        # refused), the run's recorded attempt and the frame's bytes now (else it is stale)
        made = {"run": self.fingerprints.get(run), "place": (run, index), "cache_format": self.cache_format,
                "frame": listed[index] if listed is not None and 0 <= index < len(listed) else None}
        try:  # bounded by the cache's sample shapes
            return decode_record(self._bytes(path), path, self.settings, **made), 0
        except CacheRecordError as e:
            warn(f"{e}; rebuilding it")
        try:
            rebuild_record(self.root, self.settings, run, index)
            data = read_record_bytes(path)
            sample = decode_record(data, path, self.settings, **made)
        except CacheRecordError as e:
            warn(f"{e}; the sample is replaced by another one")
            return None, 1
        if self.session is not None:
            self.session.set(str(path.relative_to(self.cache_root)), data)
        return sample, 1

    def __getitem__(self, i: int) -> dict[str, Any]:
        sample, rebuilt = self._read(self.items[i])
        replaced = 0
        while sample is None:  # the next sample of the list stands in (deterministic, so resumes agree)
            replaced += 1
            if replaced > MAX_REPLACEMENTS:
                raise ToolError(f"{MAX_REPLACEMENTS} unusable cache records in a row near {self.items[i][0]}: "
                                f"check the cache (python -m tools.cache verify --root {self.root})")
            sample, r = self._read(self.items[(i + replaced) % len(self.items)])
            rebuilt += r
        sample["rebuilt"], sample["replaced"] = rebuilt, replaced
        return sample


def collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    keys = BATCH_KEYS + tuple(k for k in NEWER_BATCH_KEYS if all(k in s for s in samples))
    batch = {k: torch.from_numpy(np.stack([np.asarray(s[k]) for s in samples])) for k in keys}
    batch["rebuilt"] = torch.tensor(sum(s["rebuilt"] for s in samples))
    batch["replaced"] = torch.tensor(sum(s["replaced"] for s in samples))
    return batch


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _worker_init(_: int) -> None:
    # The training process handles SIGTERM / SIGUSR1 (checkpoint, then exit); a worker that died on the
    # same signal (SLURM signals the whole process group) would make the DataLoader raise first.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    torch.set_num_threads(1)


def loader(dataset: Dataset, batch_size: int, num_workers: int, drop_last: bool) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, drop_last=drop_last, num_workers=num_workers,
                      collate_fn=collate, worker_init_fn=_worker_init if num_workers else None,
                      pin_memory=torch.cuda.is_available(), persistent_workers=False,
                      # its own generator: creating an iterator must not draw from the global RNG, or a
                      # resumed run (which creates one mid-epoch) would see other dropout masks
                      generator=torch.Generator())


class TrainBatches:
    """Training batches epoch after epoch, from (epoch, samples consumed in the epoch), for one rank.

    `epoch` and `consumed` always name the next batch to come: after the last batch of an epoch they
    already point to the start of the next one, which is what a checkpoint must record.

    The next epoch's loader is opened LOOKAHEAD batches before this one ends, so that its workers start and
    fill their queues while the last batches train (opened at the boundary, 12 workers on a GPU node left the
    accelerator waiting for a quarter of each epoch's first log window). Its batches are the same either way.
    """

    LOOKAHEAD = 4

    def __init__(self, epoch_samples: Callable[[int], list[Item]], make_dataset: Callable[[list[Item]], Dataset],
                 batch_size: int, rank: int, world: int, num_workers: int, epoch: int = 0, consumed: int = 0):
        self.epoch_samples, self.make_dataset = epoch_samples, make_dataset
        self.batch_size, self.rank, self.world, self.num_workers = batch_size, rank, world, num_workers
        self.epoch, self.consumed = epoch, consumed
        self._it = None
        self._left = 0
        self._upcoming = None  # (iterator, batches, epoch) of the next epoch, once opened

    def _open(self, epoch: int, consumed: int) -> tuple[Any, int, int, int]:
        """(iterator, batches in it, epoch, consumed) of this rank's rest of `epoch` after `consumed` samples; a
        resume at an epoch's very end opens the next one."""
        items = self.epoch_samples(epoch)
        global_batch = self.batch_size * self.world
        if len(items) < global_batch:
            raise ToolError(f"the train split has {len(items)} samples, fewer than one global batch "
                            f"({self.batch_size} x {self.world} processes): lower batch_size or collect more")
        if consumed >= len(items) // global_batch * global_batch:
            return self._open(epoch + 1, 0)
        rest = items[consumed:]
        left = len(rest) // global_batch
        mine = rest[self.rank::self.world][: left * self.batch_size]
        return iter(loader(self.make_dataset(mine), self.batch_size, self.num_workers, drop_last=True)), left, \
            epoch, consumed

    def next(self) -> dict[str, torch.Tensor]:
        if self._it is None:
            if self._upcoming is not None:
                (self._it, self._left, self.epoch), self._upcoming = self._upcoming, None
            else:
                self._it, self._left, self.epoch, self.consumed = self._open(self.epoch, self.consumed)
        batch = next(self._it)
        self.consumed += self.batch_size * self.world
        self._left -= 1
        if self._left == self.LOOKAHEAD and self.num_workers:
            iterator, left, epoch, _ = self._open(self.epoch + 1, 0)
            self._upcoming = iterator, left, epoch
        if self._left == 0:  # the epoch is over: point at the next one now
            self._it = None
            self.epoch, self.consumed = self.epoch + 1, 0
        return batch

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed}


def val_items(items: Sequence[Item], limit: int) -> list[Item]:
    """`limit` frames evenly spread over the held-out split (all when limit is 0 or larger than the split)."""
    items = list(items)
    if not limit or limit >= len(items):
        return items
    idx = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in idx]
