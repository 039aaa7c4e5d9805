"""Where a route run fsyncs (docs/reliability.md, "Durability: fsync"): frames are written atomically without an
fsync each, and one sync of the file system makes them durable right before the result file declares the run
complete."""

from __future__ import annotations

import os
from pathlib import Path

from tools.collect.runner.attempt import route_run
from tools.core import atomic
from tools.dataset import results
from tools.dataset.layout import Layout


def test_frames_are_not_fsynced_one_by_one_and_one_sync_comes_before_the_result(short_routes, tmp_path,
                                                                                 monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_write_result = os.fsync, results.write_result

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def sync_filesystem(path):
        events.append(("sync", str(path)))

    def write_result(layout, key, record):
        events.append(("result", str(layout.result_path(key))))
        return real_write_result(layout, key, record)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(atomic, "sync_filesystem", sync_filesystem)
    monkeypatch.setattr(results, "write_result", write_result)
    route = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    key = route_run(route=str(route), root=str(tmp_path / "root"), settings={"vehicles": 2})
    layout = Layout(tmp_path / "root")
    assert results.run_state(layout, key) is results.RunState.FINISHED
    assert len(layout.frame_paths(key)) > 10
    assert not [p for kind, p in events if kind == "fsync" and "/frames/" in p]  # no frame fsynced alone
    kinds = [kind for kind, _ in events if kind in ("sync", "result")]
    assert kinds == ["sync", "result"], events
    assert Path(events[[k for k, _ in events].index("sync")][1]) == layout.frames_dir(key)
    result_fsyncs = [p for kind, p in events if kind == "fsync" and "/results/" in p]
    assert result_fsyncs, "the result file itself is fsynced"
