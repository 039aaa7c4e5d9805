"""Towns: OpenDRIVE files. Generate one with SUMO, load any one as a SUMO network and a carla.Map.

The OpenDRIVE text is the single source of the road network: `carla.Map` reads it for road semantics
and netconvert turns it into the SUMO network that drives the traffic. Files made from the text (the SUMO
network, the renderer's scene and ground rasters) are made once and kept beside the town as hidden
`.<town>.<digest>.<kind>` files, or in ~/.cache/drivekit/towns/ when its folder is read-only
(Town.derived_file); delete them at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from tools.core import atomic
from tools.core.errors import ToolError
from tools.expert.lanes import LANE_GRAPH_VERSION, LaneGraph, keep_graph

#: Bump when the netconvert options below change, so cached networks are rebuilt.
_NET_OPTIONS = ["--offset.disable-normalization", "true", "--no-turnarounds", "true"]
_NET_CACHE_VERSION = "1"


def user_cache(*parts: str) -> Path:
    """A folder of drivekit's in the user's cache: $XDG_CACHE_HOME/drivekit/<parts>, else ~/.cache/drivekit/<parts>."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "drivekit", *parts)


class TownError(ToolError):
    """A town that cannot be made or loaded; the message names the file and the reason."""


def sumo_binary(name: str) -> str:
    """Path of a SUMO binary: from the `eclipse-sumo` package, else from PATH."""
    try:
        import sumo  # the eclipse-sumo package

        candidate = Path(sumo.SUMO_HOME) / "bin" / name
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise TownError(f"SUMO's {name} not found: install the eclipse-sumo package (make install)")
    return found


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise TownError(f"{what} failed: {' | '.join(tail)}")


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C++ libraries' own messages) for the duration of the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def parse_grid(grid: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(grid))
    if not m or not (2 <= int(m.group(1)) <= 30 and 2 <= int(m.group(2)) <= 30):
        raise TownError(f"--grid {grid!r}: expected COLSxROWS with 2 to 30 each, e.g. 4x4")
    return int(m.group(1)), int(m.group(2))


def make_town(out: Path, grid: str = "4x4", seed: int = 0, lanes: int = 2, block: float = 100.0) -> Path:
    """Generate a grid town (several lanes, traffic lights at junctions) as OpenDRIVE with SUMO."""
    cols, rows = parse_grid(grid)
    if not 1 <= lanes <= 4:
        raise TownError(f"--lanes {lanes}: expected 1 to 4 lanes per direction")
    if not 40.0 <= block <= 500.0:
        raise TownError(f"--block {block}: expected a block length between 40 and 500 metres")
    out = Path(out)
    if out.suffix != ".xodr":
        raise TownError(f"--out {out}: a town is an OpenDRIVE file, name it *.xodr")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="town-") as tmp:
        net = Path(tmp) / "grid.net.xml"
        xodr = Path(tmp) / "town.xodr"
        _run(
            [
                sumo_binary("netgenerate"), "--grid", "--grid.x-number", str(cols), "--grid.y-number", str(rows),
                "--grid.length", str(block), "--default.lanenumber", str(lanes), "--default.speed", "13.89",
                "--tls.guess", "true", "--no-turnarounds", "true", "--seed", str(seed), "--no-warnings",
                "-o", str(net),
            ],
            "netgenerate",
        )
        _run([sumo_binary("netconvert"), "-s", str(net), "--opendrive-output", str(xodr), "--no-warnings"],
             "netconvert --opendrive-output")
        atomic.write_bytes(out, xodr.read_bytes())
    return out


#: CARLA's towns ship gzipped in the py123d wheel (PyPI), folder py123d/parser/opendrive/carla_maps/.
PY123D_WHEEL = "py123d==0.7.0"
#: A town wider or taller than this (metres) is large (Town11 to Town15): its Scene is built round the route only,
#: every raster kept under a size bound (its whole-town BEV raster at 0.125 m would be 8 GB on Town13:
#: tools.collect.sensors.scene), and its background traffic lives around the ego (tools.collect.sim.world).
#: Smaller towns are built and simulated whole.
LARGE_TOWN_EXTENT = 2000.0
CARLA_MAPS_IN_WHEEL = "py123d/parser/opendrive/carla_maps/"
#: The towns `carla_towns` extracts by default: the small and middle ones (Town11 to Town15 are 2 to 10 MB).
CARLA_TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05", "Town06", "Town07", "Town10HD")
#: All twelve of CARLA's towns the wheel ships (the leaderboard 2.0's large ones too).
ALL_CARLA_TOWNS = (*CARLA_TOWNS, "Town11", "Town12", "Town13", "Town15")


def carla_towns(out: Path, names: tuple[str, ...] = CARLA_TOWNS, wheel: Path | None = None) -> list[Path]:
    """CARLA's real towns as OpenDRIVE files in `out` (<name>.xodr), taken from the py123d wheel: `wheel`, or
    downloaded with pip (the wheel only, none of its dependencies). Towns already there are kept."""
    import gzip
    import zipfile

    out = Path(out)
    wanted = [out / f"{name}.xodr" for name in names]
    if all(p.is_file() for p in wanted):
        return wanted
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="py123d-") as tmp:
        if wheel is None:
            _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, PY123D_WHEEL],
                 f"pip download {PY123D_WHEEL}")
            wheel = next(Path(tmp).glob("py123d-*.whl"))
        try:
            with zipfile.ZipFile(wheel) as z:
                for name, path in zip(names, wanted, strict=True):
                    if path.is_file():
                        continue
                    try:
                        data = gzip.decompress(z.read(f"{CARLA_MAPS_IN_WHEEL}{name}.xodr.gz"))
                    except KeyError:
                        raise TownError(f"{wheel}: has no town {name} (under {CARLA_MAPS_IN_WHEEL})") from None
                    atomic.write_bytes(path, data)
        except (zipfile.BadZipFile, OSError) as e:
            raise TownError(f"{wheel}: not a readable wheel ({e})") from None
    return wanted


_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


def read_opendrive(path: Path) -> str:
    """The text of an OpenDRIVE town file, checked before netconvert or carla.Map ever see it (carla.Map on
    arbitrary bytes may take the process down): a TownError of one line naming the file otherwise. Cheap even
    for the 89 MB towns: the root element is parsed from the head, the rest checked by its end tag."""
    path = Path(path)
    what = f"town file {path}"
    if path.is_dir():
        raise TownError(f"{what} is a folder, not an OpenDRIVE file (*.xodr)")
    if not path.is_file():
        raise TownError(f"{what} does not exist")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TownError(f"{what}: cannot read ({e.strerror})") from None
    if not data.strip():
        raise TownError(f"{what} is empty, not OpenDRIVE")
    if data.startswith(_GZIP_MAGIC):
        raise TownError(f"{what} is gzip-compressed, not OpenDRIVE text: decompress it first (gunzip -c)")
    if data.startswith(_ZIP_MAGIC):
        raise TownError(f"{what} is a zip archive, not OpenDRIVE text: extract the .xodr from it first")
    if b"\x00" in data[:65536]:
        raise TownError(f"{what} is a binary file, not OpenDRIVE text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # OpenDRIVE may declare another encoding; the checks below are ASCII
    root = _root_element(text)
    if root is None:
        raise TownError(f"{what} is not OpenDRIVE: not XML (no element found)")
    if isinstance(root, Exception):
        raise TownError(f"{what} is not OpenDRIVE: not XML ({root})")
    if root != "OpenDRIVE":
        raise TownError(f"{what} is not OpenDRIVE: its root element is <{root}>, expected <OpenDRIVE>")
    if not text.rstrip().endswith("</OpenDRIVE>"):
        raise TownError(f"{what} is cut short: it does not end with </OpenDRIVE> (an interrupted copy?)")
    if "<road " not in text and "<road>" not in text:
        raise TownError(f"{what} has no <road>: an OpenDRIVE file without a road network")
    return text


@cache
def carla_client_version() -> str | None:
    """The version of the `carla` client this Python imports, as the library says (no server needed), None when
    there is none. Not the package metadata: the 0.9.15 client for Python 3.11 (`carla-0-9-15`) installs no `carla`
    distribution, and one left beside it would name another version than the module that loads."""
    try:
        import carla
    except ImportError:
        return None
    found = re.match(r"\d+\.\d+\.\d+", str(carla.Client("127.0.0.1", 2000).get_client_version()))
    return found.group(0) if found else None


def opendrive_map(xodr: Path, text: str | None = None):
    """The carla.Map of a town file (its text checked first: read_opendrive), without its SUMO network: what
    checking routes against their town needs. A TownError naming the file when carla.Map cannot read it."""
    import carla

    xodr = Path(xodr)
    kept = kept_town(xodr) if text is None else None
    if kept is not None:  # loaded once by this worker (tools.collect.runner.zygote)
        return kept.carla_map
    text = read_opendrive(xodr) if text is None else text
    # libcarla warns on stderr about the missing georeference of SUMO's export; it is harmless.
    with _quiet_stderr():
        try:
            cmap = carla.Map(xodr.stem, text)
        except RuntimeError as e:
            raise TownError(f"town file {xodr}: carla.Map cannot read it ({e})") from None
    if not cmap.get_topology():
        raise TownError(f"town file {xodr}: carla.Map finds no lane in it (no driving road)")
    return cmap


#: Towns loaded once in this process and kept for the route runs it forks (a worker's zygote:
#: tools.collect.runner.zygote), by resolved path, with the file's identity when it was read.
_KEPT: dict[Path, tuple[tuple[int, int, int], Town]] = {}


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def keep_town(town: Town) -> None:
    """Keep `town` (and what it has loaded: carla.Map, lane graph, lanes) for open_town in this process and the
    processes forked from it."""
    path = town.xodr.resolve()
    _KEPT[path] = (_identity(path), town)


def kept_town(xodr: Path) -> Town | None:
    """The Town of `xodr` that this process keeps (keep_town), unless its file changed since it was read."""
    path = Path(xodr).resolve()
    kept = _KEPT.get(path)
    try:
        if kept is not None and kept[0] == _identity(path):
            return kept[1]
    except OSError:
        pass
    return None


def open_town(xodr: Path) -> Town:
    """The Town of `xodr`: the one kept in this process (kept_town), else loaded now."""
    return kept_town(xodr) or Town(xodr)


def _root_element(text: str) -> str | Exception | None:
    """The tag of the first element of an XML text, read from its head; the parse error when the head is not
    XML; None when no element starts there."""
    parser = ET.XMLPullParser(events=("start",))
    try:
        for start in range(0, min(len(text), 1 << 20), 4096):
            parser.feed(text[start:start + 4096])
            for _, el in parser.read_events():
                return el.tag
    except ET.ParseError as e:
        return e
    return None


@dataclass(frozen=True)
class Lane:
    """A SUMO lane in CARLA's frame, for the renderer and the world."""

    id: str
    edge: str
    index: int  # 0 is the rightmost lane
    lanes_in_edge: int
    centerline: np.ndarray  # (N, 2)
    width: float
    internal: bool  # a lane inside a junction


class Town:
    """One OpenDRIVE town, with its SUMO network and carla.Map built from the same text."""

    def __init__(self, xodr: Path):
        self.xodr = Path(xodr)
        self.text = read_opendrive(self.xodr)
        self.name = self.xodr.stem

    @cached_property
    def net(self) -> Path:
        """The SUMO network for this OpenDRIVE text (made by netconvert once, kept: derived_file), when first
        needed: a Town whose routes are refused (a waypoint off every road) writes nothing beside its file."""

        def netconvert(tmp: Path) -> None:
            _run([sumo_binary("netconvert"), "--opendrive-files", str(self.xodr), *_NET_OPTIONS,
                  "--no-warnings", "-o", str(tmp)], f"netconvert of {self.xodr}")

        return self.derived_file("net.xml", _NET_CACHE_VERSION, netconvert)

    def derived_file(self, kind: str, version: str, make: Callable[[Path], None]) -> Path:
        """A file made from this town's text once and kept: `.<name>.<digest>.<kind>` beside the town, else (a
        read-only folder) in the user's cache. The digest covers the text and `version` (what else the file
        depends on), so a changed town or maker never reads a stale file. `make(tmp)` writes it; it is renamed
        into place complete, so concurrent makers and a killed one leave no partial file behind the name."""
        digest = hashlib.sha256(f"{self._text_digest}\n{version}".encode()).hexdigest()[:12]
        name = f".{self.name}.{digest}.{kind}"
        candidates = [self.xodr.parent / name, user_cache("towns") / name]
        for path in candidates:
            if path.exists():
                return path
        for path in candidates:
            tmp = path.with_name(f"{atomic.TMP_PREFIX}{os.getpid()}-{path.name}")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if not os.access(path.parent, os.W_OK | os.X_OK):  # asked first: a maker that runs a program
                    continue  # (netconvert) reports a folder it may not write in its own words, not PermissionError
                make(tmp)
                os.replace(tmp, path)
                return path
            except PermissionError:
                continue
            finally:
                tmp.unlink(missing_ok=True)
        raise TownError(f"cannot write the {kind} of {self.xodr}: neither its folder nor {candidates[-1].parent} "
                        "is writable; set XDG_CACHE_HOME to a writable folder")

    @cached_property
    def _text_digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @cached_property
    def offset(self) -> tuple[float, float]:
        with open(self.net) as f:
            head = f.read(20000)
        m = re.search(r'netOffset="([-\d.eE+]+),([-\d.eE+]+)"', head)
        return (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)

    # ------------------------------------------------------------------ frames
    def sumo_to_carla(self, xy: np.ndarray) -> np.ndarray:
        """SUMO network coordinates (N, 2) to CARLA's frame: undo netOffset, negate y."""
        xy = np.asarray(xy, dtype=np.float64)
        out = np.empty_like(xy)
        out[..., 0] = xy[..., 0] - self.offset[0]
        out[..., 1] = -(xy[..., 1] - self.offset[1])
        return out

    def carla_to_sumo(self, xy: Sequence[float]) -> tuple[float, float]:
        """One point (x, y) in CARLA's frame to SUMO network coordinates: sumo_to_carla's inverse."""
        x, y = xy
        return x + self.offset[0], -y + self.offset[1]

    @staticmethod
    def sumo_angle_to_yaw(angle: float | np.ndarray) -> float | np.ndarray:
        """SUMO heading (degrees clockwise from north) to CARLA yaw (degrees), in (-180, 180]; elementwise."""
        yaw = (np.asarray(angle, dtype=np.float64) - 90.0) % 360.0
        yaw = np.where(yaw > 180.0, yaw - 360.0, yaw)
        return float(yaw) if yaw.ndim == 0 else yaw

    @staticmethod
    def yaw_to_sumo_angle(yaw: float) -> float:
        """CARLA yaw (degrees) to SUMO heading (degrees clockwise from north, in [0, 360)): sumo_angle_to_yaw's
        inverse."""
        return (yaw + 90.0) % 360.0

    # ------------------------------------------------------------------ parts
    def load(self) -> dict[str, float]:
        """Load every part of the town a route run reads (carla.Map, lane graph, bounds, lanes), for a process that
        keeps the town for the route runs it forks (keep_town); the seconds each took."""
        seconds = {}
        for part in ("carla_map", "lane_graph", "bounds", "lanes", "parking_lanes"):
            started = time.perf_counter()
            getattr(self, part)
            seconds[part] = time.perf_counter() - started
        return seconds

    @cached_property
    def carla_map(self):
        cmap = opendrive_map(self.xodr, self.text)
        keep_graph(cmap, self)  # RoutePlanner(cmap) reads this town's kept lane graph (lane_graph)
        return cmap

    @cached_property
    def lane_graph(self) -> LaneGraph:
        """The route planner's lane graph of this town (tools.expert.lanes.LaneGraph): walked once from
        carla_map (seconds on Town12 and Town13), kept beside the town, read back in milliseconds.
        RoutePlanner(town.carla_map) finds it (tools.expert.lanes.keep_graph)."""
        path = self.derived_file("lanes.npz", f"{LANE_GRAPH_VERSION} carla {carla_client_version()}",
                                 lambda tmp: LaneGraph.build(self.carla_map).save(tmp))
        return LaneGraph.load(path)

    @cached_property
    def lanes(self) -> list[Lane]:
        """Every vehicle lane of the SUMO network, in CARLA's frame."""
        import sumolib

        net = sumolib.net.readNet(str(self.net), withInternal=True)
        lanes = []
        for edge in net.getEdges(withInternal=True):
            func = edge.getFunction()
            if func not in ("", "normal", "internal"):
                continue
            n = len(edge.getLanes())
            for lane in edge.getLanes():
                if not lane.allows("passenger"):
                    continue
                lanes.append(
                    Lane(
                        id=lane.getID(),
                        edge=edge.getID(),
                        index=lane.getIndex(),
                        lanes_in_edge=n,
                        centerline=self.sumo_to_carla(np.array(lane.getShape(), dtype=np.float64)[:, :2]),
                        width=float(lane.getWidth()),
                        internal=func == "internal",
                    )
                )
        return lanes

    @cached_property
    def parking_lanes(self) -> tuple[str, ...]:
        """The SUMO lanes netconvert made of OpenDRIVE parking lanes: it lets cars drive them (at the road's speed),
        CARLA's traffic never does; the embedded world closes them to its vehicles (tools.collect.sim.world)."""
        return tuple(re.findall(r'<lane id="([^"]+)"[^>]*\stype="parking"', self.net.read_text()))

    @cached_property
    def bounds(self) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) of all lanes in CARLA's frame: computed from the lanes once (reading the SUMO
        network takes 3 s on Town13) and kept beside the town, so that a route run whose scene is kept reads 4
        numbers instead."""
        path = self.derived_file("bounds.json", f"lane bounds of {self.net.name}",
                                 lambda tmp: tmp.write_text(json.dumps(self._lane_bounds())))
        return tuple(json.loads(path.read_text()))

    def _lane_bounds(self) -> list[float]:
        pts = np.concatenate([lane.centerline for lane in self.lanes])
        return [float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max())]
