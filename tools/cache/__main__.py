"""python -m tools.cache COMMAND: the persistent training cache of a dataset root.

Commands:
  build    preprocess every frame of every finished route run into ROOT/cache/<settings key>/
  verify   check every record's checksum and what it was made from (its run's recorded attempt, its frame's place
           and bytes); --repair rebuilds damaged, missing and stale records

Settings (tools/dataset/samples.py CacheSettings) are given as --name=value, e.g. --image_width=320;
other settings make another cache folder beside the first. `python -m tools.cache COMMAND --help`
explains each command. Record format: docs/cache.md; frame to sample: tools/cache/preprocess.py.
"""

from __future__ import annotations

from tools.core import cli


def build(root: str | None = None, shard: str | None = None, force: bool = False, only: str | None = None,
          **settings) -> None:
    """Preprocess every frame of every finished route run of ROOT into its training cache.

    The cache folder is ROOT/cache/<hash of the settings and the cache format>/; it says which on
    start. Its settings.json records how far apart the frames are (frame_dt, from the runs' run.json):
    one cache holds one recording rate, and a run of another rate is refused before anything is
    written. Resumable: records already there are skipped (--force redoes them); every record is written
    atomically, so an interrupted build just runs again. Several processes may build at once, also on
    several machines: --shard I/N takes the route runs whose stable hash is I modulo N (SLURM array
    task I of N).

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        shard: I/N: build only slice I (0 <= I < N) of the route runs.
        force: rebuild records that already exist.
        only: data/<Scenario>/<run>:INDEX: (re)build this one record only (what training calls on a
            damaged record).
        settings: preprocessing settings as --name=value (tools/dataset/samples.py CacheSettings),
            e.g. --image_width=320 --horizon=10.
    """
    from tools.cache.build import build_cache

    build_cache(root=root, shard=shard, force=force, only=only, settings=settings)


def verify(root: str | None = None, repair: bool = False, **settings) -> None:
    """Check every record's checksum in the cache of the settings, and what it was made from: its run's recorded
    attempt, its place (run and frame index) and its frame's fingerprint; report damaged (another place included),
    missing and stale records.

    Exits non-zero when a record is damaged, missing or stale, unless --repair rebuilt them all.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        repair: rebuild damaged, missing and stale records from the dataset.
        settings: the preprocessing settings of the cache to check, as for build (default settings when
            none are given).
    """
    from tools.cache.build import verify_cache

    verify_cache(root=root, repair=repair, settings=settings)


COMMANDS = {"build": build, "verify": verify}

if __name__ == "__main__":
    cli.main("cache", COMMANDS, name="python -m tools.cache")
