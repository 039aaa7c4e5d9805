"""Leaderboard 2.0 route files: read, write and check them (tools.collect.base.route_gen generates them for a town).

    <routes>
      <route id="0" town="town">
        <weathers><weather route_percentage="0" cloudiness="..." .../></weathers>   (optional)
        <waypoints><position x="..." y="..." z="..."/> ...</waypoints>
        <scenarios><scenario name="..." type="..."><trigger_point x y z yaw/></scenario></scenarios>
      </route>
    </routes>

Coordinates are CARLA's world frame. A route's run is filed under the type of its first scenario.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.collect.base.scenario_types import check_params
from tools.collect.base.town import opendrive_map
from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import is_plain_name
from tools.dataset.weather import weather_problem

#: A route file larger than this is refused before anything is planned: Bench2Drive-220 in one file is 0.7 MB,
#: LEAD's largest 0.4 MB; a 200 MB file took a collector to 3.9 GB for minutes.
MAX_ROUTE_FILE_BYTES = 32 << 20
#: Route run folder for a route without scenarios.
NO_SCENARIO = "NoScenario"
#: A route waypoint farther than this from the nearest driving lane centre is off the road network.
MAX_OFF_ROAD_M = 5.0
TOWN_SUFFIX = ".xodr"
TOWNS_FOLDER = "towns"


class RouteError(ToolError):
    pass


@dataclass
class Route:
    id: str
    town: str
    waypoints: np.ndarray  # (N, 3), CARLA frame
    #: {"name", "type", "trigger": [x, y, z, yaw], "params": {"distance": {"value": "70"}, ...}}
    scenarios: list[dict] = field(default_factory=list)
    weathers: list[dict[str, float]] = field(default_factory=list)

    @property
    def scenario(self) -> str:
        """The scenario-type folder of this route's runs."""
        return self.scenarios[0]["type"] if self.scenarios else NO_SCENARIO

    @property
    def digest(self) -> str:
        """What a run of this route drives, as 16 hex digits: its town, waypoints (to 0.01 m), scenario blocks and
        weathers. A route run is this content, not only its file and id: routes written again under the same
        names (another --seed) are other runs (tools.collect.runner.jobs.changed_routes)."""
        body = {"town": self.town, "waypoints": np.round(np.asarray(self.waypoints, dtype=np.float64), 2).tolist(),
                "scenarios": self.scenarios, "weathers": self.weathers}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _floats(el: ET.Element, names: tuple[str, ...], where: str) -> list[float]:
    try:
        values = [float(el.attrib[n]) for n in names]
    except KeyError as e:
        raise RouteError(f"{where}: <{el.tag}> lacks attribute {e.args[0]}") from None
    except ValueError:
        raise RouteError(f"{where}: <{el.tag}> has a non-numeric coordinate {dict(el.attrib)}") from None
    if not all(math.isfinite(v) for v in values):  # float() takes "nan" and "inf"
        raise RouteError(f"{where}: <{el.tag}> has a coordinate that is not a finite number {dict(el.attrib)}")
    return values


def _plain(value: str, what: str, where: str) -> str:
    """An attribute that becomes a folder or file name: no path, no "..", no odd characters."""
    if not is_plain_name(value):
        raise RouteError(f"{where}: {what} {value!r} is not a plain name (letters, digits, _ . -, no path); "
                         "rename it in the route file")
    return value


def read_routes(path: Path) -> list[Route]:
    """Parse a route file. Any problem is a RouteError naming the file and the reason."""
    path = Path(path)
    try:
        root = ET.fromstring(files.read_bytes(path, MAX_ROUTE_FILE_BYTES))
    except ET.ParseError as e:
        raise RouteError(f"{path}: malformed route XML ({e})") from None
    except files.TooLarge:
        raise RouteError(f"{path}: {path.stat().st_size / 2**20:.0f} MiB, more than a route file may hold "
                         f"({MAX_ROUTE_FILE_BYTES >> 20} MiB; the largest of Bench2Drive and LEAD is under 1 MiB): "
                         "split it into smaller files") from None
    except OSError as e:
        raise RouteError(f"{path}: cannot read ({e.strerror or e})") from None
    if root.tag != "routes":
        raise RouteError(f"{path}: not a route file (root element <{root.tag}>, expected <routes>)")
    routes = []
    for el in root.findall("route"):
        rid, town = el.get("id"), el.get("town")
        if not rid or not town:
            raise RouteError(f"{path}: a <route> lacks its id or town attribute")
        _plain(rid, "route id", str(path))
        where = f"{path}: route {rid}"
        _plain(town, "town", where)
        wps = el.find("waypoints")
        positions = [] if wps is None else wps.findall("position")
        if wps is None and el.find("waypoint") is not None:
            raise RouteError(f"{where}: a leaderboard 1.0 route (<waypoint> elements, its scenarios in a separate "
                             "JSON file), which leaderboard 2.0 and the embedded world do not read: use the set's 2.0 "
                             "version (<waypoints><position x y z/>...; Longest6: LEAD's "
                             "data/benchmark_routes/longest6.xml)")
        if len(positions) < 2:  # the leaderboard's interpolate_trajectory traces nothing through fewer either
            raise RouteError(f"{where}: needs at least 2 <position> waypoints, has {len(positions)}; no route can be "
                             "traced through fewer (leave the file out)")
        waypoints = np.array([_floats(p, ("x", "y", "z"), where) for p in positions], dtype=np.float64)
        scenarios = []
        for sc in el.findall("scenarios/scenario"):
            if not sc.get("type") or not sc.get("name"):
                raise RouteError(f"{where}: a <scenario> lacks its name or type")
            _plain(sc.get("type"), "scenario type", where)
            tp = sc.find("trigger_point")
            if tp is None:  # the leaderboard's RouteScenario reads trigger_points[0] of every scenario
                raise RouteError(f"{where}: scenario {sc.get('name')} has no <trigger_point x y z yaw/>, without which "
                                 "the leaderboard evaluator fails on the route; add one")
            trigger = _floats(tp, ("x", "y", "z", "yaw"), where)
            # Every other child is a parameter, as the leaderboard reads them (config.other_parameters):
            # <distance value="70"/>, <frequency from="20" to="60"/>.
            params = {p.tag: dict(p.attrib) for p in sc if p.tag != "trigger_point"}
            problem = check_params(params, sc.get("type"))
            if problem:
                raise RouteError(f"{where}: scenario {sc.get('name')}: {problem}")
            scenarios.append({"name": sc.get("name"), "type": sc.get("type"), "trigger": trigger, "params": params})
        weathers = []
        for w in el.findall("weathers/weather"):
            try:
                weathers.append({k: float(v) for k, v in w.attrib.items()})
                if not all(math.isfinite(v) for v in weathers[-1].values()):
                    raise ValueError
            except ValueError:
                raise RouteError(f"{where}: a <weather> has a non-numeric value {dict(w.attrib)}") from None
            problem = weather_problem(weathers[-1])
            if problem:
                raise RouteError(f"{where}: a <weather>'s {problem} (CARLA WeatherParameters' range); fix the value")
        routes.append(Route(rid, town, waypoints, scenarios, weathers))
    if not routes:
        raise RouteError(f"{path}: no <route> in the file")
    if len({r.id for r in routes}) != len(routes):
        raise RouteError(f"{path}: two routes share an id")
    return routes


def write_route(path: Path, route: Route) -> None:
    root = ET.Element("routes")
    el = ET.SubElement(root, "route", id=route.id, town=route.town)
    if route.weathers:
        ws = ET.SubElement(el, "weathers")
        for w in route.weathers:
            ET.SubElement(ws, "weather", {k: f"{v:g}" for k, v in w.items()})
    wps = ET.SubElement(el, "waypoints")
    for x, y, z in route.waypoints:
        ET.SubElement(wps, "position", x=f"{x:.1f}", y=f"{y:.1f}", z=f"{z:.1f}")
    scs = ET.SubElement(el, "scenarios")
    for sc in route.scenarios:
        s = ET.SubElement(scs, "scenario", name=sc["name"], type=sc["type"])
        x, y, z, yaw = sc["trigger"]
        ET.SubElement(s, "trigger_point", x=f"{x:.1f}", y=f"{y:.1f}", z=f"{z:.1f}", yaw=f"{yaw:.1f}")
        for name, attrib in sc.get("params", {}).items():
            ET.SubElement(s, name, {k: str(v) for k, v in attrib.items()})
    ET.indent(root)
    atomic.write_bytes(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


# ----------------------------------------------------------------------------- towns of routes


def find_route_files(routes_dir: Path) -> list[Path]:
    """Every *.xml under a folder, recursively, sorted; hidden files and folders and towns/ are skipped."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(routes_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != TOWNS_FOLDER)
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".xml") and not f.startswith(".")]
    return found




def find_towns_dir(route_file: Path, towns: str | Path | None, fallback: Path | None = None) -> Path:
    """--towns when given, else the nearest towns/ folder at or above the route file's folder, else `fallback`
    (a CARLA run's: the towns of the CARLA install, tools.collect.carla.run.install_towns)."""
    if towns is not None and str(towns) != "":
        d = Path(towns)
        if not d.is_dir():
            raise RouteError(f"--towns {towns}: not a folder")
        return d
    for parent in Path(route_file).absolute().parents:
        if (parent / TOWNS_FOLDER).is_dir():
            return parent / TOWNS_FOLDER
    if fallback is not None:
        return fallback
    raise RouteError(f"{route_file}: no {TOWNS_FOLDER}/ folder above it; pass --towns DIR")


def town_file(route_file: Path, route: Route, towns_dir: Path) -> Path:
    path = towns_dir / f"{route.town}{TOWN_SUFFIX}"
    if not path.is_file():
        there = ", ".join(sorted(p.stem for p in towns_dir.glob(f"*{TOWN_SUFFIX}"))) or "none"
        raise RouteError(f"{route_file}: route {route.id} names town '{route.town}', but {path} does not exist "
                         f"(towns there: {there})")
    return path


def check_routes(entries: list[tuple[Path, Route]], towns_dir: Path | None) -> None:
    """Every route's town exists and every waypoint lies on the town's road network."""
    maps: dict[Path, object] = {}
    for path, route in entries:
        xodr = town_file(path, route, towns_dir or find_towns_dir(path, None))
        if xodr not in maps:
            maps[xodr] = opendrive_map(xodr)  # no SUMO network: nothing is written beside the town
        off = off_road(maps[xodr], route.waypoints)
        if off is not None:
            i, d = off
            x, y, _ = route.waypoints[i]
            raise RouteError(f"{path}: route {route.id} waypoint {i} ({x:.1f}, {y:.1f}) is {d:.1f} m from "
                             f"the nearest driving lane of town '{route.town}' (at most {MAX_OFF_ROAD_M} m)")


def off_road(cmap, waypoints: np.ndarray) -> tuple[int, float] | None:
    """(index, metres) of the first waypoint farther than MAX_OFF_ROAD_M from a driving lane's centre; None."""
    import carla

    for i, (x, y, z) in enumerate(waypoints):
        w = cmap.get_waypoint(carla.Location(float(x), float(y), float(z)), project_to_road=True,
                              lane_type=carla.LaneType.Driving)
        d = math.inf if w is None else math.hypot(w.transform.location.x - x, w.transform.location.y - y)
        if d > MAX_OFF_ROAD_M:
            return i, d
    return None


def select_route(route_file: Path, route_id: str | None) -> Route:
    found = read_routes(route_file)
    if route_id is None:
        if len(found) > 1:
            ids = ", ".join(r.id for r in found)
            raise ToolError(f"{route_file}: holds {len(found)} routes ({ids}); pick one with --route-id")
        return found[0]
    for r in found:
        if r.id == str(route_id):
            return r
    raise ToolError(f"--route-id {route_id}: not in {route_file} (ids: {', '.join(r.id for r in found)})")
