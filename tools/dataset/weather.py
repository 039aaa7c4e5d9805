"""The weather class of a route run: the one rule that turns the weather a run was driven in into a name.

A route file's `<weathers>` block holds CARLA WeatherParameters as numbers (cloudiness, precipitation,
fog_density, sun_altitude_angle, ...); a run drives in the route's first `<weather>` and every recorded frame
holds it as its `weather` measurement (docs/dataset-format.md; run.json does not). Splits and reports group
runs by weather, and numbers do not group: `weather_class` names the weather after CARLA's presets, a
condition and a time of day (ClearNoon, CloudySunset, RainNight, ...). A route without `<weathers>` runs in
the world's default weather: "Default".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Thresholds of the classes (CARLA WeatherParameters units: percent, degrees). A change bumps "version".
WEATHER_CLASSES: dict[str, Any] = {
    "version": 1,
    "rain": 10.0,  # precipitation >= this: Rain
    "fog": 50.0,  # else fog_density >= this: Fog
    "cloudy": 50.0,  # else cloudiness >= this: Cloudy; else Clear
    "sunset": 15.0,  # sun_altitude_angle below this: Sunset (low sun) ...
    "night": 0.0,  # ... and below this: Night; else Noon
}

DEFAULT = "Default"

#: The ranges of CARLA's WeatherParameters (its Python API reference) and of the leaderboard's route_percentage:
#: a route file's <weather> value outside them is refused (`weather_problem`), never recorded as it is. The sun's
#: azimuth is an angle (leaderboard route files use -1); distances and scattering have no upper bound.
WEATHER_RANGES: dict[str, tuple[float, float]] = {
    "route_percentage": (0.0, 100.0),
    "cloudiness": (0.0, 100.0),
    "precipitation": (0.0, 100.0),
    "precipitation_deposits": (0.0, 100.0),
    "wind_intensity": (0.0, 100.0),
    "sun_azimuth_angle": (-360.0, 360.0),
    "sun_altitude_angle": (-90.0, 90.0),
    "fog_density": (0.0, 100.0),
    "fog_distance": (0.0, math.inf),
    "fog_falloff": (0.0, math.inf),
    "wetness": (0.0, 100.0),
    "scattering_intensity": (0.0, math.inf),
    "mie_scattering_scale": (0.0, math.inf),
    "rayleigh_scattering_scale": (0.0, math.inf),
    "dust_storm": (0.0, 100.0),
}


def weather_problem(weather: Mapping[str, float]) -> str | None:
    """What is out of range in a weather's values ("fog_density=250 is outside 0 to 100"), None when nothing."""
    for key, value in weather.items():
        low, high = WEATHER_RANGES.get(key, (-math.inf, math.inf))
        if not low <= value <= high:
            return f"{key}={value:g} is outside {low:g} to {high:g}"
    return None


def _value(weather: Mapping[str, Any], key: str, missing: float) -> float:
    try:
        value = float(weather.get(key, missing))
    except (TypeError, ValueError):
        return missing
    return value if math.isfinite(value) else missing


def weather_class(weather: Mapping[str, Any] | None) -> str:
    """"ClearNoon", "CloudySunset", "RainNight", ...: the condition (Rain, Fog, Cloudy, Clear: the first that
    holds) and the time of day (Night, Sunset, Noon) of a `weather` measurement; "Default" for none."""
    if not isinstance(weather, Mapping) or not weather:
        return DEFAULT
    c = WEATHER_CLASSES
    if _value(weather, "precipitation", 0.0) >= c["rain"]:
        condition = "Rain"
    elif _value(weather, "fog_density", 0.0) >= c["fog"]:
        condition = "Fog"
    elif _value(weather, "cloudiness", 0.0) >= c["cloudy"]:
        condition = "Cloudy"
    else:
        condition = "Clear"
    sun = _value(weather, "sun_altitude_angle", 45.0)
    time = "Night" if sun < c["night"] else "Sunset" if sun < c["sunset"] else "Noon"
    return condition + time
