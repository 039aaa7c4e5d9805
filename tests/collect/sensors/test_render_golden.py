"""The renderer's output is pinned: every sensor of two frames of tests/collect/sensors/test_render.py's world (eight
actors of every kind, lights; the ego straight and turned 33 degrees) hashed, against tests/golden/render-digests.json.
Rendering changes for speed must keep every sensor bit-identical (this test), or state a tolerance here."""

from __future__ import annotations

import hashlib
import json

import numpy as np
from conftest import TESTS
from test_render import traffic, turned, world  # noqa: F401  (the module's fixtures)

GOLDEN = TESTS / "golden" / "render-digests.json"


def digests(sensors: dict[str, tuple[np.ndarray, str]]) -> dict[str, str]:
    return {name: hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16] + f" {array.dtype} "
            f"{'x'.join(map(str, array.shape))}" for name, (array, _) in sorted(sensors.items())}


def test_every_sensor_is_bit_identical_to_the_pinned_render(turned):  # noqa: F811
    got = {str(turn): digests(sensors) for turn, (_, sensors) in sorted(turned.items())}
    if not GOLDEN.exists():  # (re)pin: delete the file and run this test once, with the renderer you trust
        GOLDEN.write_text(json.dumps(got, indent=2) + "\n")
    assert got == json.loads(GOLDEN.read_text())
