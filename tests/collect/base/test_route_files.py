"""Route files of the shapes users have (LEAD's data routes, its Longest6 in the 2.0 format, Bench2Drive's), written
here in those shapes: read as the leaderboard reads them; a leaderboard 1.0 file and a route with no waypoints are
one line each. Over the fetched sets themselves (not in CI): docs/scenarios.md, "Route sets users have"."""

from __future__ import annotations

import pytest

from tools.collect.base.routes import RouteError, read_routes
from tools.collect.base.scenario_types import CATALOGUE

_WEATHER = ('<weather route_percentage="{p}" cloudiness="10.0" precipitation="0.0" precipitation_deposits="0.0" '
            'wetness="0.0" wind_intensity="10.0" sun_azimuth_angle="180.0" sun_altitude_angle="30.0" '
            'fog_density="2.0" fog_distance="0.75" fog_falloff="0.1" scattering_intensity="1.0" '
            'mie_scattering_scale="0.03" />')


def _file(tmp_path, body: str):
    path = tmp_path / "route.xml"
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n<routes>\n{body}\n</routes>\n')
    return path


def test_a_lead_data_route_with_its_own_scenario_type_and_attributes_reads(tmp_path):
    # LEAD's data routes: ids like route_001795, two weathers (start and end), positions with pitch/yaw/roll/command,
    # types of LEAD's own scenario classes (no class of scenario_runner: recorded by name only).
    path = _file(tmp_path, f'''<route id="route_001795" town="Town15">
  <weathers>{_WEATHER.format(p=0)}{_WEATHER.format(p=100)}</weathers>
  <waypoints>
    <position x="680.5" y="712.9" z="118.0" pitch="2.7" yaw="-139.4" roll="0.0" command="4" />
    <position x="640.1" y="690.2" z="117.0" pitch="2.7" yaw="-139.4" roll="0.0" command="4" />
  </waypoints>
  <scenarios>
    <scenario name="CrossJunctionDefectTrafficLight_1" type="CrossJunctionDefectTrafficLight">
      <trigger_point x="680.5" y="712.9" z="118.0" yaw="34.44" />
      <flow_speed value="9" /><traffic_direction value="right" /><source_dist_interval from="24" to="26" />
    </scenario>
  </scenarios>
</route>''')
    (route,) = read_routes(path)
    assert (route.id, route.town, route.scenario) == ("route_001795", "Town15", "CrossJunctionDefectTrafficLight")
    assert len(route.weathers) == 2 and route.weathers[0]["fog_falloff"] == pytest.approx(0.1)
    assert "CrossJunctionDefectTrafficLight" not in CATALOGUE


def test_a_longest6_route_with_many_scenarios_and_directions_reads(tmp_path):
    blocks = "".join(f'<scenario type="{t}" name="{t}_{i}"><trigger_point x="{i}.0" y="2.0" z="0.0" yaw="90.0" />'
                     f'{extra}</scenario>'
                     for i, (t, extra) in enumerate([
                         ("DynamicObjectCrossing", '<direction value="left" />'),
                         ("OppositeVehicleRunningRedLight", '<direction value="opposite" />'),
                         ("OppositeVehicleTakingPriority", '<direction value="ref" />'),
                         ("ParkingCutIn", '<direction value="40" />'),
                         ("SignalizedJunctionLeftTurn", '<flow_speed value="10" />')]))
    path = _file(tmp_path, f'''<route id="5" town="Town01">
  <weathers>{_WEATHER.format(p=0)}</weathers>
  <waypoints><position x="157.98" y="39.39" z="0.0" /><position x="157.96" y="17.95" z="0.0" /></waypoints>
  <scenarios>{blocks}</scenarios>
</route>''')
    (route,) = read_routes(path)
    assert [s["params"].get("direction", {}).get("value") for s in route.scenarios] == [
        "left", "opposite", "ref", "40", None]


def test_a_leaderboard_1_route_file_is_one_line_naming_the_format(tmp_path):
    path = _file(tmp_path, '''<route id="0" town="Town01">
  <waypoint pitch="0.0" roll="0.0" x="334.7" y="288.9" yaw="89.9" z="0.0"/>
  <waypoint pitch="0.0" roll="0.0" x="334.7" y="313.6" yaw="89.9" z="0.0"/>
</route>''')
    with pytest.raises(RouteError, match=r"route 0: a leaderboard 1\.0 route .* use the set's 2\.0 version"):
        read_routes(path)


@pytest.mark.parametrize("positions", ["", '<position x="680.5" y="712.9" z="118.0" />'])
def test_a_route_with_fewer_than_two_waypoints_is_one_line(tmp_path, positions):
    # 38 of LEAD's data routes (data/data_routes/lead) have an empty <waypoints/> or one position.
    path = _file(tmp_path, f'<route id="route_1" town="Town03"><waypoints>{positions}</waypoints><scenarios/></route>')
    with pytest.raises(RouteError, match=r"route route_1: needs at least 2 <position> waypoints, has [01]; no route"):
        read_routes(path)
