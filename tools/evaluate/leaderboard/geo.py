"""GNSS in the embedded world, in the two conventions a leaderboard agent meets.

- The route plan (`set_global_plan`'s GPS plan): the leaderboard's own equatorial Mercator around the town's
  reference (+lat_0, +lon_0 of the OpenDRIVE header's geoReference; 42.0, 2.0 when it names none), with CARLA's y
  (pointing south) subtracted (leaderboard-2.0 leaderboard/utils/route_manipulation.py: `_get_latlon_ref`,
  `_location_to_gps`). Written again here, with the same constants.
- The GNSS sensor: CARLA's own projection of the installed client (`carla.Map.transform_to_geolocation`, LibCarla's
  GeoLocation of the map's geoReference). CARLA 0.9.16 projects with a spherical transverse Mercator whose
  latitude grows with CARLA's y; 0.9.15 and earlier used the plan's Mercator. The sensor is therefore exactly what
  a CARLA server of the client's version delivers, and agents that convert GNSS back must know the version (as
  LEAD's `find_gps_ref` and its version switch do).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import carla

#: The leaderboard's Earth radius (route_manipulation._location_to_gps) and CARLA's (GeoLocation.cpp).
EARTH_RADIUS_EQUA = 6378137.0
#: The reference the leaderboard assumes when the header has no geoReference (route_manipulation._get_latlon_ref).
DEFAULT_REF = (42.0, 2.0)
#: The leaderboard's GNSS noise (agent_wrapper._preprocess_sensor_spec): standard deviations in degrees (lat, lon)
#: and metres (alt), no bias.
GNSS_NOISE_STDDEV = (0.000005, 0.000005, 0.000005)


def latlon_ref(opendrive: str) -> tuple[float, float]:
    """The (lat_0, lon_0) the leaderboard reads from an OpenDRIVE text's header geoReference."""
    lat, lon = DEFAULT_REF
    header = re.search(r"<header\b.*?</header>", opendrive, re.S)
    geo = re.search(r"<geoReference>(.*?)</geoReference>", header.group(0) if header else "", re.S)
    if geo:
        for item in geo.group(1).replace("<![CDATA[", " ").replace("]]>", " ").split():
            if item.startswith("+lat_0="):
                lat = float(item.split("=", 1)[1])
            elif item.startswith("+lon_0="):
                lon = float(item.split("=", 1)[1])
    return lat, lon


def plan_gps(lat_ref: float, lon_ref: float, x: float, y: float, z: float) -> dict[str, float]:
    """One point of the leaderboard's GPS plan, {'lat', 'lon', 'z'}, of CARLA world (x, y, z)."""
    scale = math.cos(math.radians(lat_ref))
    mx = scale * math.radians(lon_ref) * EARTH_RADIUS_EQUA + x
    my = scale * EARTH_RADIUS_EQUA * math.log(math.tan(math.radians(90.0 + lat_ref) / 2.0)) - y
    lon = math.degrees(mx / (EARTH_RADIUS_EQUA * scale))
    lat = 2.0 * math.degrees(math.atan(math.exp(my / (EARTH_RADIUS_EQUA * scale)))) - 90.0
    return {"lat": lat, "lon": lon, "z": z}


def gnss(carla_map: Any, x: float, y: float, z: float) -> tuple[float, float, float]:
    """(lat, lon, alt) the GNSS sensor of the installed CARLA version reads at CARLA world (x, y, z)."""
    g = carla_map.transform_to_geolocation(carla.Location(x=float(x), y=float(y), z=float(z)))
    return float(g.latitude), float(g.longitude), float(g.altitude)


#: CARLA 0.9.16's transverse Mercator scale (LibCarla GeoLocation.cpp).
TMERC_SCALE = 0.9996


@functools.cache
def carla_version() -> tuple[int, ...]:
    """The CARLA client's version (what projects the GNSS sensor), as the library says (the 0.9.15 client for
    Python 3.11 installs no `carla` distribution: its metadata would be missing or another's); 0.9.16 when there
    is none; read once."""
    from tools.collect.base.town import carla_client_version

    version = carla_client_version()
    return tuple(int(p) for p in version.split(".")) if version else (0, 9, 16)


def reference_from_plan(lat: float, lon: float, x: float, y: float) -> tuple[float, float]:
    """(lat_0, lon_0) of the map from one point of the plan in GPS (the leaderboard's Mercator) and in the world: the
    reference is not exposed to a sensor agent, so it is solved for (as LEAD's `find_gps_ref`)."""
    lat_ref = lat
    for _ in range(30):  # the scale depends on lat_ref: a fixed point
        scale = math.cos(math.radians(lat_ref))
        my = scale * EARTH_RADIUS_EQUA * math.log(math.tan(math.radians(90.0 + lat) / 2.0)) + y
        lat_ref = 2.0 * math.degrees(math.atan(math.exp(my / (EARTH_RADIUS_EQUA * scale)))) - 90.0
    lon_ref = lon - math.degrees(x / (EARTH_RADIUS_EQUA * math.cos(math.radians(lat_ref))))
    return lat_ref, lon_ref


def gnss_to_world(lat: float, lon: float, lat_ref: float, lon_ref: float,
                  version: tuple[int, ...] | None = None) -> tuple[float, float]:
    """CARLA world (x, y) of a GNSS reading: the inverse of the sensor's projection of CARLA `version` (the
    installed client's by default)."""
    if (version or carla_version()) >= (0, 9, 16):
        phi, dlon = math.radians(lat), math.radians(lon - lon_ref)
        b = math.cos(phi) * math.sin(dlon)
        x = TMERC_SCALE * EARTH_RADIUS_EQUA * math.atanh(b)
        y = TMERC_SCALE * EARTH_RADIUS_EQUA * (math.atan2(math.tan(phi), math.cos(dlon)) - math.radians(lat_ref))
        return x, y
    scale = math.cos(math.radians(lat_ref))
    x = scale * EARTH_RADIUS_EQUA * math.radians(lon - lon_ref)
    y = scale * EARTH_RADIUS_EQUA * (math.log(math.tan(math.radians(90.0 + lat_ref) / 2.0))
                                     - math.log(math.tan(math.radians(90.0 + lat) / 2.0)))
    return x, y
