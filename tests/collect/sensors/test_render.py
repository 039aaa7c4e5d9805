"""The sensor renderer on a real SUMO town: labels match pixels, rays and the BEV; and the frame picture."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from tools.collect.base.recording import box_label
from tools.collect.base.town import Town, make_town
from tools.collect.inspect.show import show_frame
from tools.collect.sensors.render import Renderer, bev_class
from tools.collect.sensors.scene import SHADES, SLOT_LINE, SLOT_ROAD, SLOT_SIDEWALK, SLOT_TERRAIN, STATIC_ID0, Scene
from tools.core.errors import ToolError
from tools.dataset import semantics as sem
from tools.dataset.frames import read_frame, write_frame
from tools.dataset.geometry import BevGrid, camera_intrinsics, ego_to_world, project, world_to_ego
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.rig import BevConfig, CameraConfig, LidarConfig, RigConfig
from tools.expert.state import Box, Light, Snapshot

GROUND = (sem.ROAD, sem.ROADLINE, sem.SIDEWALK, sem.TERRAIN)
#: The ground slot of the scene's raster behind each ground class.
SLOT_OF = {sem.ROAD: SLOT_ROAD, sem.ROADLINE: SLOT_LINE, sem.SIDEWALK: SLOT_SIDEWALK, sem.TERRAIN: SLOT_TERRAIN}


def lane_pose(lane, s: float) -> tuple[float, float, float]:
    """(x, y, yaw degrees) at arc length s along a lane's centre line."""
    line = lane.centerline
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    k = int(np.clip(np.searchsorted(arc, s), 1, len(line) - 1))
    yaw = math.degrees(math.atan2(line[k, 1] - line[k - 1, 1], line[k, 0] - line[k - 1, 0]))
    return float(np.interp(s, arc, line[:, 0])), float(np.interp(s, arc, line[:, 1])), yaw


def ground_slots(raster, pts_world: np.ndarray) -> np.ndarray:
    """The scene raster's ground slot under world points (N, 2)."""
    rows = np.floor((pts_world[:, 1] - raster.y0) / raster.res).astype(int)
    cols = np.floor((pts_world[:, 0] - raster.x0) / raster.res).astype(int)
    return raster.codes[rows, cols] // SHADES


def lane_length(lane) -> float:
    return float(np.hypot(*np.diff(lane.centerline, axis=0).T).sum())


def off_centre(actor_id: int, lane, s: float, right: float, cls: int, size: tuple[float, float, float],
           speed: float = 0.0, turn: float = 0.0) -> Box:
    """A box `right` metres to the right of a lane's centre line (a walker on the kerb, a cone in the lane)."""
    x, y, yaw = lane_pose(lane, s)
    rad = math.radians(yaw)
    return Box(actor_id, cls, x - math.sin(rad) * right, y + math.cos(rad) * right, size[2] / 2, yaw + turn, *size,
               speed)


def car(actor_id: int, lane, s: float, cls: int = sem.CAR) -> Box:
    x, y, yaw = lane_pose(lane, s)
    if cls == sem.TRUCK:
        return Box(actor_id, cls, x, y, 1.6, yaw, 8.0, 2.5, 3.2, 5.0)
    return Box(actor_id, cls, x, y, 0.75, yaw, 4.6, 2.0, 1.5, 5.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 3x3 SUMO town, its scene, a renderer and two hand-made snapshots on a signalled approach."""
    town = Town(make_town(tmp_path_factory.mktemp("town") / "town.xodr", grid="3x3"))
    scene = Scene(town, seed=3)
    renderer = Renderer(scene, RigConfig())
    lanes = {lane.id: lane for lane in town.lanes}
    # The ego on the rightmost lane of a long signalled approach, 45 m before its stop line.
    signal = next(s for s in scene.signals if lanes[s.lane].index == 0 and lane_length(lanes[s.lane]) > 70)
    ego_lane = lanes[signal.lane]
    left_lane = lanes[f"{ego_lane.edge}_1"]
    s0 = lane_length(ego_lane) - 45.0
    x, y, yaw = lane_pose(ego_lane, s0)
    ego = Box(0, sem.CAR, x, y, 0.75, yaw, 4.8, 2.0, 1.5, 6.0)
    lights = [Light(link, s.x, s.y, s.yaw, s.width, "red" if s is signal else "green")
              for s in scene.signals for link in s.links]
    lead = car(1, ego_lane, s0 + 10.0)
    beside = car(2, left_lane, s0 - 8.0)
    one_car = Snapshot(time=1.0, ego=ego, actors=[lead, beside], lights=lights)
    # Besides vehicles, what scenarios place (tools.collect.sim.scenarios): a walker stepping off the kerb, a
    # cone, a cyclist.
    traffic = Snapshot(time=2.0, ego=ego, lights=lights, actors=[
        lead, beside, car(3, left_lane, s0 + 20.0), car(4, ego_lane, s0 + 25.0, sem.TRUCK), car(5, ego_lane, s0 - 9.0),
        off_centre(6, ego_lane, s0 + 14.0, 2.4, sem.PEDESTRIAN, (0.5, 0.6, 1.8), 1.3, -90.0),
        off_centre(7, ego_lane, s0 + 7.0, 1.3, sem.STATIC, (0.4, 0.4, 0.7)),
        off_centre(8, left_lane, s0 + 12.0, -0.9, sem.BICYCLE, (1.8, 0.7, 1.7), 3.0)])
    return {"town": town, "scene": scene, "renderer": renderer, "signal": signal, "one_car": one_car,
            "traffic": traffic, "lead": lead}


@pytest.fixture(scope="module")
def one_car(world):
    return world["renderer"].render(world["one_car"])


@pytest.fixture(scope="module")
def traffic(world):
    return world["renderer"].render(world["traffic"])


@pytest.fixture(scope="module")
def turned(world, traffic):
    """(snapshot, sensors) of the traffic frame as it is and with the ego turned 33 degrees off its lane, by turn."""
    snap = world["traffic"]
    e = snap.ego
    off = Snapshot(time=snap.time, actors=snap.actors, lights=snap.lights,
                   ego=Box(e.id, e.cls, e.x, e.y, e.z, e.yaw + 33.0, e.length, e.width, e.height, e.speed))
    return {0.0: (snap, traffic), 33.0: (off, world["renderer"].render(off))}


# ------------------------------------------------------------------------------------------- config


def test_rig_config_round_trips_through_a_json_dict():
    rig = RigConfig(cameras=(CameraConfig(), CameraConfig(name="left", yaw=-60.0, width=320, height=160)),
                    lidar=LidarConfig(channels=16, range=50.0), bev=BevConfig(pixels=128, ego_offset_px=20))
    again = RigConfig.from_dict(json.loads(json.dumps(rig.to_dict())))
    assert again == rig
    assert RigConfig.from_dict({}) == RigConfig()


@pytest.mark.parametrize("make, field", [
    (lambda: CameraConfig(width=0), "width"),
    (lambda: CameraConfig(height=12.5), "height"),
    (lambda: CameraConfig(fov=180.0), "fov"),
    (lambda: CameraConfig(name="front camera"), "name"),
    (lambda: LidarConfig(range=-1.0), "range"),
    (lambda: LidarConfig(upper_fov=-40.0), "upper_fov"),
    (lambda: BevConfig(ego_offset_px=128), "ego_offset_px"),
    (lambda: BevConfig(resolution=0), "resolution"),
    (lambda: RigConfig(cameras=(CameraConfig(), CameraConfig())), "front"),
    (lambda: RigConfig.from_dict({"lidar": {"chanels": 16}}), "chanels"),
    (lambda: RigConfig.from_dict({"cameras": [{"name": "front", "zoom": 2}]}), "zoom"),
    (lambda: RigConfig.from_dict({"radar": {}}), "radar"),
])
def test_rig_config_rejects_a_bad_value_naming_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


# ------------------------------------------------------------------------------------------- geometry


def test_project_puts_points_behind_the_camera_at_nonpositive_depth():
    cam = CameraConfig()
    ego = Box(0, sem.CAR, 10.0, 20.0, 0.75, 30.0, 4.8, 2.0, 1.5)
    ahead = ego_to_world(ego, np.array([[20.0, 0.0, cam.z], [cam.x - 5.0, 0.0, 1.0]]))
    uv, depth = project(cam, ego, ahead)
    k = camera_intrinsics(cam)
    assert depth[0] == pytest.approx(20.0 - cam.x)
    assert uv[0] == pytest.approx([k[0, 2], k[1, 2]])  # straight ahead at camera height: the image centre
    assert depth[1] <= 0 and np.isnan(uv[1]).all()
    assert world_to_ego(ego, ahead)[0] == pytest.approx([20.0, 0.0, cam.z])


def test_scene_structures_stand_off_the_road_with_ids_that_never_clash_with_actors(world):
    scene = world["scene"]
    g = scene.ground
    assert all(b.id >= STATIC_ID0 for b in scene.static_boxes)
    assert len({b.id for b in scene.static_boxes}) == len(scene.static_boxes)
    buildings = [b for b in scene.static_boxes if b.cls == sem.BUILDING]
    assert len(buildings) > 20
    for b in buildings:
        # Sample the footprint every 25 cm: only terrain under a building.
        u, v = np.meshgrid(np.linspace(-0.5, 0.5, 40), np.linspace(-0.5, 0.5, 40))
        c, s = math.cos(math.radians(b.yaw)), math.sin(math.radians(b.yaw))
        x = b.x + c * u * b.length - s * v * b.width
        y = b.y + s * u * b.length + c * v * b.width
        slots = g.codes[((y - g.y0) / g.res).astype(int), ((x - g.x0) / g.res).astype(int)] >> 5
        assert (slots == 0).all(), f"building {b.id} stands on the road or sidewalk"
    heads = [scene.static_boxes[s.head] for s in scene.signals]
    assert heads and all(h.cls == sem.TRAFFIC_LIGHT and h.z > 4.0 for h in heads)
    assert Scene(world["town"], seed=3).static_boxes == scene.static_boxes  # deterministic from the seed


# ------------------------------------------------------------------------------------------- camera


def test_render_returns_every_sensor_with_its_dtype_and_codec(one_car):
    cam = CameraConfig()
    assert {name: codec for name, (_, codec) in one_car.items()} == RigConfig().sensor_names()
    assert list(one_car) == list(RigConfig().sensor_names())  # the rig's recording order
    expect = {"rgb_front": ((cam.height, cam.width, 3), np.uint8, "jpeg"),
              "semantics_front": ((cam.height, cam.width), np.uint8, "zstd"),
              "depth_front": ((cam.height, cam.width), np.uint16, "zstd"),
              "bev": ((256, 256), np.uint8, "zstd")}
    for name, (shape, dtype, codec) in expect.items():
        array, got = one_car[name]
        assert (array.shape, array.dtype, got) == (shape, dtype, codec), name
    points, labels = one_car["lidar"][0], one_car["lidar_labels"][0]
    assert points.dtype == np.float32 and points.shape[1] == 4 and one_car["lidar"][1] == "zstd_shuffle"
    assert labels.dtype == np.uint32 and labels.shape == (len(points), 2) and one_car["lidar_labels"][1] == "zstd"



@pytest.mark.parametrize("frame", ["one_car", "traffic"])
def test_recorded_jpegs_are_as_close_to_the_rendered_image_as_pillows(frame, request):
    """The frame writer's JPEG encoder (simplejpeg, libjpeg-turbo) is not Pillow's, so the bytes differ. The stated
    tolerance: the decoded pixels of a rendered camera image within 0.5 dB PSNR of Pillow's encoder at the same
    quality, and above 35 dB."""
    import io

    from PIL import Image

    from tools.dataset.codec import decode_array, encode_array
    from tools.dataset.rig import JPEG_QUALITY

    image = request.getfixturevalue(frame)["rgb_front"][0]

    def psnr(a):
        return 10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - image) ** 2))

    ours = decode_array(encode_array(image, "jpeg", jpeg_quality=JPEG_QUALITY))
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=JPEG_QUALITY)
    pillow = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert psnr(ours) > 35 and psnr(ours) > psnr(pillow) - 0.5, (psnr(ours), psnr(pillow))

def test_vehicle_ahead_fills_its_projected_box_and_its_centre_reads_the_rear_face_depth(world, one_car):
    cam, ego, lead = CameraConfig(), world["one_car"].ego, world["lead"]
    labels, depth = one_car["semantics_front"][0], one_car["depth_front"][0]
    uv, d = project(cam, ego, lead.corners())
    assert (d > 0).all()
    c0, r0 = np.floor(uv.min(0)).astype(int)
    c1, r1 = np.ceil(uv.max(0)).astype(int)
    rows, cols = np.nonzero(labels == sem.CAR)  # the only vehicle in front of the camera
    assert len(rows) > 500
    assert (cols >= c0).all() and (cols < c1).all() and (rows >= r0).all() and (rows < r1).all()
    assert (labels[r0:r1, c0:c1] == sem.CAR).mean() > 0.6
    centre_uv, _ = project(cam, ego, np.array([[lead.x, lead.y, lead.z]]))
    col, row = np.floor(centre_uv[0]).astype(int)
    heading = np.array([math.cos(math.radians(lead.yaw)), math.sin(math.radians(lead.yaw)), 0.0])
    rear = np.array([lead.x, lead.y, lead.z]) - heading * lead.length / 2
    _, rear_depth = project(cam, ego, rear[None])
    assert labels[row, col] == sem.CAR
    assert depth[row, col] / 100.0 == pytest.approx(rear_depth[0], abs=0.03)


def test_ground_pixels_have_the_depth_of_a_flat_ground_and_the_sky_has_none(one_car):
    cam = CameraConfig()
    k = camera_intrinsics(cam)
    labels, depth = one_car["semantics_front"][0], one_car["depth_front"][0]
    rows = np.arange(cam.height)[:, None] + 0.5
    with np.errstate(divide="ignore"):
        expected = np.where(rows > k[1, 2], cam.z * k[1, 1] / (rows - k[1, 2]), 0.0) * np.ones((1, cam.width))
    ground = np.isin(labels, GROUND)
    assert ground.sum() > 0.3 * labels.size
    near = ground & (expected < 100.0)
    assert np.abs(depth[near] / 100.0 - expected[near]).max() < 0.01
    sky = labels == sem.SKY
    assert sky.any() and (depth[sky] == 0).all() and not sky[rows[:, 0] > k[1, 2]].any()


def _outside(points: np.ndarray, boxes: list[Box]) -> np.ndarray:
    """How far (m) each world point (N, 3) is outside the nearest of `boxes` (0 when inside one)."""
    worst = np.full(len(points), np.inf)
    for b in boxes:
        c, s = math.cos(math.radians(b.yaw)), math.sin(math.radians(b.yaw))
        dx, dy = points[:, 0] - b.x, points[:, 1] - b.y
        local = np.stack([c * dx + s * dy, -s * dx + c * dy, points[:, 2] - b.z], axis=1)
        excess = (np.abs(local) - np.array([b.length, b.width, b.height]) / 2).max(axis=1)
        worst = np.minimum(worst, np.maximum(excess, 0.0))
    return worst


def _back_projected(cam: CameraConfig, ego: Box, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, columns, world points) of the camera's pixels with a depth, each put back where its depth says."""
    k = camera_intrinsics(cam)
    rows, cols = np.nonzero(depth > 0)
    d = depth[rows, cols] / 100.0
    right, up = (cols + 0.5 - k[0, 2]) / k[0, 0] * d, -(rows + 0.5 - k[1, 2]) / k[1, 1] * d
    yaw = math.radians(cam.yaw)
    ego_pts = np.stack([cam.x + math.cos(yaw) * d - math.sin(yaw) * right,
                        cam.y + math.sin(yaw) * d + math.cos(yaw) * right, cam.z + up], axis=1)
    return rows, cols, ego_to_world(ego, ego_pts)


def test_camera_pixels_of_vehicles_and_buildings_back_project_onto_their_boxes(world, traffic):
    cam, snap, scene = CameraConfig(), world["traffic"], world["scene"]
    labels, depth = traffic["semantics_front"][0], traffic["depth_front"][0]
    rows, cols, pts = _back_projected(cam, snap.ego, depth)
    d = depth[rows, cols] / 100.0
    cls = labels[rows, cols]
    vehicles = np.isin(cls, sem.VEHICLES + sem.VULNERABLE + (sem.STATIC,))
    assert vehicles.sum() > 1000
    assert (cls == sem.PEDESTRIAN).sum() > 50 and (cls == sem.STATIC).sum() > 20 and (cls == sem.BICYCLE).sum() > 20
    assert _outside(pts[vehicles], snap.actors).max() < 0.02  # a centimetre of depth rounding
    buildings = cls == sem.BUILDING
    near = [b for b in scene.static_boxes if b.cls == sem.BUILDING
            and math.hypot(b.x - snap.ego.x, b.y - snap.ego.y) < 200]
    assert buildings.sum() > 1000
    assert _outside(pts[buildings], near).max() < 0.05
    ground = np.isin(cls, GROUND)
    assert np.abs(pts[ground & (d < 60), 2]).max() < 0.02


def test_a_box_reaching_behind_the_camera_and_one_across_the_lidars_seam_are_drawn_where_they_are(world):
    """A car alongside the ego reaches behind the camera's near plane (its rectangle is clipped there) and a
    car straight ahead straddles the LiDAR's azimuth 0, its first and last ray column (cast in two spans):
    both are seen, where their boxes are."""
    snap, cam = world["one_car"], CameraConfig()
    e = snap.ego
    rad = math.radians(e.yaw)
    # 3.5 m to the ego's left (a lane over), its centre level with the camera; 12 m straight ahead.
    alongside = Box(11, sem.CAR, e.x + 3.5 * math.sin(rad) + cam.x * math.cos(rad),
                    e.y - 3.5 * math.cos(rad) + cam.x * math.sin(rad), 0.75, e.yaw, 4.6, 2.0, 1.5, 0.0)
    ahead = Box(12, sem.CAR, e.x + 12.0 * math.cos(rad), e.y + 12.0 * math.sin(rad), 0.75, e.yaw, 4.6, 2.0, 1.5, 0.0)
    snap = Snapshot(time=snap.time, ego=e, actors=[alongside, ahead], lights=snap.lights)
    out = world["renderer"].render(snap)
    labels, depth = out["semantics_front"][0], out["depth_front"][0]
    rows, cols, pts = _back_projected(cam, e, depth)
    beside = (labels[rows, cols] == sem.CAR) & (cols < cam.width // 4)
    assert beside.sum() > 200 and cols[beside].min() == 0  # at the image's left edge, where it leaves the view
    assert _outside(pts[beside], [alongside]).max() < 0.02
    points, point_labels = out["lidar"][0], out["lidar_labels"][0]
    mine = point_labels[:, 1] == ahead.id
    azimuth = np.degrees(np.arctan2(points[mine, 1], points[mine, 0]))
    assert mine.sum() > 50 and (azimuth > 0.5).any() and (azimuth < -0.5).any()  # both sides of the seam
    assert _outside(ego_to_world(e, points[mine, :3].astype(np.float64)), [ahead]).max() < 0.05


def test_camera_sees_the_red_head_over_the_ego_lane(world, one_car):
    head = world["scene"].static_boxes[world["signal"].head]
    uv, d = project(CameraConfig(), world["one_car"].ego, np.array([[head.x, head.y, head.z]]))
    col, row = np.floor(uv[0]).astype(int)
    assert d[0] > 0 and one_car["semantics_front"][0][row, col] == sem.TRAFFIC_LIGHT
    red, green, _ = one_car["rgb_front"][0][row, col].tolist()
    assert red > 150 > green  # the lamp facing the ego shows its state


@pytest.mark.parametrize("turn", [0.0, 33.0])
def test_camera_ground_pixels_show_the_ground_where_the_geometry_puts_their_rays(world, turned, turn):
    """The renderer turns its rays into the world inline, in float32: each ground pixel's class is the ground
    under its ray's hit point as geometry.ego_to_world places it (ties at raster cell edges aside)."""
    (snap, sensors), cam = turned[turn], CameraConfig()
    ego, labels = snap.ego, sensors["semantics_front"][0]
    k = camera_intrinsics(cam)
    rows, cols = np.nonzero(np.isin(labels, GROUND))
    drop = (rows + 0.5 - k[1, 2]) / k[1, 1]  # the ray's fall per metre along the optical axis
    t = cam.z / drop
    near = t < 80.0
    rows, cols, t = rows[near], cols[near], t[near]
    right = (cols + 0.5 - k[0, 2]) / k[0, 0]
    c, s = math.cos(math.radians(cam.yaw)), math.sin(math.radians(cam.yaw))
    hits = np.stack([cam.x + t * (c - s * right), cam.y + t * (s + c * right)], axis=1)
    expected = ground_slots(world["scene"].ground, ego_to_world(ego, hits))
    got = np.vectorize(SLOT_OF.get)(labels[rows, cols])
    assert len(rows) > 20000
    assert (got != expected).mean() < 1e-3


def test_render_is_deterministic(world, traffic):
    again = Renderer(world["scene"], RigConfig()).render(world["traffic"])
    assert again.keys() == traffic.keys()
    for name, (array, codec) in traffic.items():
        assert again[name][1] == codec
        np.testing.assert_array_equal(again[name][0], array, err_msg=name)


# ------------------------------------------------------------------------------------------- lidar


def test_lidar_points_labelled_with_an_actor_lie_inside_its_box(world, traffic):
    snap = world["traffic"]
    points, labels = traffic["lidar"][0], traffic["lidar_labels"][0]
    actors = {a.id: a for a in snap.actors}
    hit = set(labels[labels[:, 1] > 0, 1].tolist())
    assert {1, 2, 3, 4, 5, 6, 7, 8} <= hit
    world_pts = ego_to_world(snap.ego, points[:, :3].astype(np.float64))
    for k in hit:
        a = actors[k]
        mine = labels[:, 1] == k
        assert (labels[mine, 0] == a.cls).all()
        c, s = math.cos(math.radians(a.yaw)), math.sin(math.radians(a.yaw))
        dx, dy = world_pts[mine, 0] - a.x, world_pts[mine, 1] - a.y
        local = np.stack([c * dx + s * dy, -s * dx + c * dy, world_pts[mine, 2] - a.z], axis=1)
        assert (np.abs(local) <= np.array([a.length, a.width, a.height]) / 2 + 0.05).all(), f"actor {k}"
    static = np.isin(labels[:, 0], (sem.BUILDING, sem.POLE, sem.TRAFFIC_LIGHT))
    assert static.any() and (labels[static, 1] == 0).all()


def test_lidar_ground_is_flat_nothing_is_beyond_range_and_nothing_comes_from_the_ego(world, traffic):
    cfg, ego = LidarConfig(), world["traffic"].ego
    points, labels = traffic["lidar"][0], traffic["lidar_labels"][0]
    ground = np.isin(labels[:, 0], GROUND)
    assert ground.sum() > 5000
    assert np.abs(points[ground, 2]).max() < 1e-3 and (labels[ground, 1] == 0).all()
    dist = np.linalg.norm(points[:, :3] - np.array([cfg.x, 0.0, cfg.z]), axis=1)
    assert dist.max() <= cfg.range + 1e-3
    inside = (np.abs(points[:, 0]) <= ego.length / 2) & (np.abs(points[:, 1]) <= ego.width / 2)
    assert not (inside & (points[:, 2] <= ego.height)).any()
    assert ((points[:, 3] > 0) & (points[:, 3] <= 1)).all()


@pytest.mark.parametrize("turn", [0.0, 33.0])
def test_lidar_ground_points_show_the_ground_under_them(world, turned, turn):
    (snap, sensors), scene = turned[turn], world["scene"]
    points, labels = sensors["lidar"][0], sensors["lidar_labels"][0]
    ground = np.isin(labels[:, 0], GROUND)
    under = ground_slots(scene.ground, ego_to_world(snap.ego, points[ground, :2].astype(np.float64)))
    np.testing.assert_array_equal(np.vectorize(SLOT_OF.get)(labels[ground, 0]), under)


# ------------------------------------------------------------------------------------------- bev


def test_bev_shows_the_ego_a_vehicle_ten_metres_ahead_and_the_red_stop_line(world, one_car):
    bev_cfg, ego, signal = BevConfig(), world["one_car"].ego, world["signal"]
    bev = one_car["bev"][0]
    grid = BevGrid.of_rig(bev_cfg)
    (ec, er), (vc, vr) = np.floor(grid.ego_to_pixel(np.array([[0.0, 0.0], [10.0, 0.0]]))).astype(int)
    assert (er, ec) == (bev_cfg.pixels // 2 + bev_cfg.ego_offset_px, bev_cfg.pixels // 2)
    assert bev[er, ec] == sem.BEV_EGO
    assert (vr, vc) == (er - 40, ec) and bev[vr, vc] == sem.BEV_VEHICLE
    stop = world_to_ego(ego, np.array([[signal.x, signal.y, 0.0]]))[:, :2]
    sc, sr = np.floor(grid.ego_to_pixel(stop)[0]).astype(int)
    assert bev[sr, sc] == sem.BEV_LIGHT_RED
    assert (bev == sem.BEV_LIGHT_GREEN).any()  # the opposite approach's light
    assert (bev == sem.BEV_ROAD).mean() > 0.1 and (bev == sem.BEV_LANE_MARKING).any()


@pytest.mark.parametrize("turn", [0.0, 33.0])
def test_bev_ground_cells_show_the_ground_where_the_geometry_puts_them(world, turned, turn):
    """The renderer places the BEV's cells in the world with an inline outer sum; each ground cell shows the
    ground at its centre as BevGrid and geometry.ego_to_world place it (ties at raster cell edges aside)."""
    (snap, sensors), renderer = turned[turn], world["renderer"]
    ego, grid, bev = snap.ego, BevGrid.of_rig(BevConfig()), sensors["bev"][0]
    bev_of_slot = {SLOT_TERRAIN: sem.BEV_EMPTY, SLOT_SIDEWALK: sem.BEV_EMPTY, SLOT_ROAD: sem.BEV_ROAD,
                   SLOT_LINE: sem.BEV_LANE_MARKING}
    rows, cols = np.nonzero(np.isin(bev, (sem.BEV_EMPTY, sem.BEV_ROAD, sem.BEV_LANE_MARKING)))
    centres = ego_to_world(ego, grid.pixel_to_ego(cols + 0.5, rows + 0.5))
    expected = np.vectorize(bev_of_slot.get)(ground_slots(renderer.bev_raster, centres))
    assert len(rows) > 0.7 * bev.size
    assert (bev[rows, cols] != expected).mean() < 1e-3


@pytest.mark.parametrize("turn", [0.0, 33.0])
def test_bev_draws_each_actor_in_its_class_on_the_cells_its_box_covers(turned, turn):
    (snap, sensors) = turned[turn]
    bev = sensors["bev"][0]
    grid = BevGrid.of_rig(BevConfig())
    rows, cols = np.nonzero(np.isin(bev, (sem.BEV_VEHICLE, sem.BEV_PEDESTRIAN, sem.BEV_OBSTACLE)))
    centres = ego_to_world(snap.ego, grid.pixel_to_ego(cols + 0.5, rows + 0.5))
    slack = grid.resolution * math.sqrt(2)  # PIL also fills the cells a polygon's edge passes through
    assert _outside(np.column_stack([centres, np.full(len(rows), 1.0)]), snap.actors).max() <= slack
    for actor in snap.actors:
        col, row = np.floor(grid.ego_to_pixel(world_to_ego(snap.ego, np.array([actor.x, actor.y])))).astype(int)
        assert bev[row, col] == bev_class(actor.cls), f"actor {actor.id}"
    assert {bev_class(a.cls) for a in snap.actors} == {sem.BEV_VEHICLE, sem.BEV_PEDESTRIAN, sem.BEV_OBSTACLE}


def test_every_light_of_the_sumo_world_is_shown_on_its_head_by_id(town_xodr, short_routes):
    """The SUMO world names its lights "<tls id>:<link index>" as the scene's heads do: the renderer finds every
    light's head by id, every head within the world's view radius is driven, and the light the expert stops for
    is one of the lights."""
    from tools.collect.base.routes import read_routes
    from tools.collect.sim.world import VIEW_RADIUS_M, SumoWorld
    from tools.expert.expert import Expert
    from tools.expert.planner import RoutePlanner

    town = Town(town_xodr)
    route_file = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    dense = RoutePlanner(town.carla_map).trace(read_routes(route_file)[0].waypoints)
    scene = Scene(town)
    renderer = Renderer(scene, RigConfig())
    sumo = SumoWorld(town, dense, seed=1, vehicles=10, sim_hz=20)
    expert = Expert(dense, sumo.dt, town.carla_map)
    states, ego_lights, samples = set(), 0, 0
    try:
        for tick in range(1200):
            decision = expert.step(sumo)
            if decision.light is not None:
                assert decision.light["id"] in {li.id for li in sumo.snapshot().lights}
                ego_lights += 1
            sumo.step(decision.control)
            if tick % 50:
                continue
            snap = sumo.snapshot()
            assert snap.lights
            assert renderer.unmatched_lights(snap.lights) == []
            near = {f"{line.tls}:{i}" for line in sumo.signals.stop_lines for i, _ in line.links
                    if math.hypot(line.x - snap.ego.x, line.y - snap.ego.y) < VIEW_RADIUS_M}
            driven = {s.head for s in scene.signals for light in snap.lights if light.id in s.links}
            assert driven == {s.head for s in scene.signals if near & set(s.links)}
            states |= {light.state for light in snap.lights}
            samples += 1
    finally:
        sumo.close()
    assert {"red", "green"} <= states and ego_lights > 0 and samples > 5


# ------------------------------------------------------------------------------------------- show


def _record(world, sensors, run_dir):
    snap = world["traffic"]
    e = snap.ego
    measurements = Measurements(
        frame=0, tick=40, time=snap.time, speed=e.speed, acceleration=0.0, target_speed=e.speed, speed_limit=13.9,
        ego={"x": e.x, "y": e.y, "z": e.z, "yaw": e.yaw, "speed": e.speed, "extent": [e.length, e.width, e.height]},
        command=int(RoadOption.LANEFOLLOW), next_command=int(RoadOption.STRAIGHT), command_name="LANEFOLLOW",
        target_point=[e.x, e.y], target_point_next=[e.x, e.y], route=[], junction=False, light_hazard=True,
        vehicle_hazard=False)
    (run_dir / "frames").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"rig": RigConfig().to_dict()}))
    write_frame(run_dir / "frames" / "00000.msgpack", 0, measurements, [box_label(b, e) for b in snap.actors],
                sensors, run=f"{run_dir.parent.name}/{run_dir.name}")


def test_show_frame_draws_a_recorded_frame_into_one_png(world, traffic, tmp_path, monkeypatch):
    run = tmp_path / "Scenario" / "route0_rep0"
    _record(world, traffic, run)
    assert set(read_frame(run / "frames" / "00000.msgpack")["sensors"]) == set(traffic)
    out = show_frame(run, 0, out=tmp_path / "pic.png")
    with Image.open(out) as img:
        assert img.format == "PNG" and img.width >= 3 * 512 and img.height >= 256 + 512
        pixels = np.asarray(img.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 200  # a picture, not a blank canvas
    monkeypatch.chdir(tmp_path)
    assert show_frame(run / "frames" / "00000.msgpack") == tmp_path / "frame-00000.png"
    assert show_frame(run / "frames", frame=-1).exists()


def test_show_frame_names_what_exists_when_asked_for_a_missing_frame(world, traffic, tmp_path):
    run = tmp_path / "Scenario" / "route0_rep0"
    _record(world, traffic, run)
    with pytest.raises(ToolError, match=r"route0_rep0 has frames 0\.\.0, no frame 7"):
        show_frame(run, 7)
    with pytest.raises(ToolError, match="nowhere"):
        show_frame(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ToolError, match="no frames"):
        show_frame(tmp_path / "empty")
