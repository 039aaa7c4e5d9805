"""The picture of an evaluated run (tools.collect.base.film.RunFilm), without driving: frames on a grid of simulated
time, an infraction always filmed and held longer, long runs thinned to at most max_frames."""

from __future__ import annotations

import numpy as np
from PIL import Image

from tools.collect.base.film import FRAME_MS, INFRACTION_MS, RunFilm
from tools.dataset import semantics
from tools.expert.control import Control
from tools.expert.expert import Decision
from tools.expert.state import Box


def decision() -> Decision:
    path = np.array([[2.0 * i, 0.0] for i in range(8)])
    return Decision(control=Control(), target_speed=5.0, reason="policy", path=path)


def ego(t: float) -> Box:
    return Box(id=0, cls=semantics.CAR, x=5.0 * t, y=0.0, z=0.8, yaw=0.0, length=4.5, width=2.0, height=1.6, speed=5.0)


def test_frames_every_half_second_an_infraction_held_and_long_runs_thinned(tmp_path):
    film = RunFilm(tmp_path / "run.webp", None, every_s=0.5, max_frames=20)
    route = np.array([[float(x), 0.0] for x in range(0, 400, 2)])
    actors = [Box(id=1, cls=semantics.CAR, x=12.0, y=3.5, z=0.8, yaw=0.0, length=4.5, width=2.0, height=1.6)]
    # 20 s at 20 Hz: past 20 frames (at 9.5 s) every other ordinary frame goes and the spacing becomes 1 s; past 20
    # again (at 19 s) the same, to 2 s: 10 ordinary frames and the infraction remain.
    for tick in range(0, 400):
        t = tick / 20
        if film.due(t):
            film.add(t, ego(t), decision(), None, actors, route)
        if tick == 101:
            film.add(t, ego(t), decision(), None, actors, route, ["collisions_vehicle"])
    assert film.write() == tmp_path / "run.webp"
    with Image.open(tmp_path / "run.webp") as im:
        assert im.format == "WEBP" and im.is_animated
        assert im.n_frames == 11 and film.every_s == 2.0
    assert [f.infraction for f in film.frames].count(True) == 1
    durations = [INFRACTION_MS if f.infraction else FRAME_MS for f in film.frames]
    assert max(durations) == INFRACTION_MS


def test_no_frame_writes_no_picture(tmp_path):
    assert RunFilm(tmp_path / "run.webp", None).write() is None
    assert not (tmp_path / "run.webp").exists()
