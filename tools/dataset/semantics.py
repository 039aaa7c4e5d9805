"""Semantic classes of camera, LiDAR and BEV labels. Ids and colours follow CARLA 0.9.14+ (Cityscapes)."""

from __future__ import annotations

import numpy as np

UNLABELED = 0
ROAD = 1
SIDEWALK = 2
BUILDING = 3
WALL = 4
FENCE = 5
POLE = 6
TRAFFIC_LIGHT = 7
TRAFFIC_SIGN = 8
VEGETATION = 9
TERRAIN = 10
SKY = 11
PEDESTRIAN = 12
RIDER = 13
CAR = 14
TRUCK = 15
BUS = 16
MOTORCYCLE = 18
BICYCLE = 19
STATIC = 20  # props: traffic cones, warning signs (CARLA's Static)
DYNAMIC = 21
ROADLINE = 24

NAMES = {
    UNLABELED: "unlabeled",
    ROAD: "road",
    SIDEWALK: "sidewalk",
    BUILDING: "building",
    WALL: "wall",
    FENCE: "fence",
    POLE: "pole",
    TRAFFIC_LIGHT: "traffic_light",
    TRAFFIC_SIGN: "traffic_sign",
    VEGETATION: "vegetation",
    TERRAIN: "terrain",
    SKY: "sky",
    PEDESTRIAN: "pedestrian",
    RIDER: "rider",
    CAR: "car",
    TRUCK: "truck",
    BUS: "bus",
    MOTORCYCLE: "motorcycle",
    BICYCLE: "bicycle",
    STATIC: "static",
    DYNAMIC: "dynamic",
    ROADLINE: "roadline",
}

#: Vehicle classes (what a 3D box of a vehicle is labelled with).
VEHICLES = (CAR, TRUCK, BUS, MOTORCYCLE)
#: Classes of a collision the leaderboard counts as one with a pedestrian (a cyclist rides a bicycle).
VULNERABLE = (PEDESTRIAN, RIDER, BICYCLE)


#: What semantics.actor_kind names an actor.
ACTOR_KINDS = ("vehicle", "pedestrian", "cyclist", "obstacle")


def actor_kind(cls: int) -> str:
    """What an actor's box is, by its class: "vehicle", "pedestrian", "cyclist" or "obstacle" (a prop). The
    world's collision kinds, the BEV's classes and the expert's reasons are made from it."""
    cls = int(cls)
    if cls in VEHICLES:
        return "vehicle"
    if cls == PEDESTRIAN:
        return "pedestrian"
    return "cyclist" if cls in VULNERABLE else "obstacle"

#: RGB colour of each class id (CARLA's CityScapesPalette), for pictures.
PALETTE = np.zeros((256, 3), dtype=np.uint8)
for _id, _rgb in {
    ROAD: (128, 64, 128),
    SIDEWALK: (244, 35, 232),
    BUILDING: (70, 70, 70),
    WALL: (102, 102, 156),
    FENCE: (190, 153, 153),
    POLE: (153, 153, 153),
    TRAFFIC_LIGHT: (250, 170, 30),
    TRAFFIC_SIGN: (220, 220, 0),
    VEGETATION: (107, 142, 35),
    TERRAIN: (152, 251, 152),
    SKY: (70, 130, 180),
    PEDESTRIAN: (220, 20, 60),
    RIDER: (255, 0, 0),
    CAR: (0, 0, 142),
    TRUCK: (0, 0, 70),
    BUS: (0, 60, 100),
    MOTORCYCLE: (0, 0, 230),
    BICYCLE: (119, 11, 32),
    STATIC: (110, 190, 160),
    DYNAMIC: (170, 120, 50),
    ROADLINE: (157, 234, 50),
}.items():
    PALETTE[_id] = _rgb

# BEV raster channels' classes: the BEV label is a single-channel uint8 image of these ids.
BEV_EMPTY = 0
BEV_ROAD = 1
BEV_LANE_MARKING = 2
BEV_VEHICLE = 3
BEV_EGO = 4
BEV_LIGHT_RED = 5
BEV_LIGHT_YELLOW = 6
BEV_LIGHT_GREEN = 7
BEV_PEDESTRIAN = 8  # pedestrians and cyclists
BEV_OBSTACLE = 9  # static props in the road (cones, warning signs)
BEV_NAMES = {
    BEV_EMPTY: "empty",
    BEV_ROAD: "road",
    BEV_LANE_MARKING: "lane_marking",
    BEV_VEHICLE: "vehicle",
    BEV_EGO: "ego",
    BEV_LIGHT_RED: "light_red",
    BEV_LIGHT_YELLOW: "light_yellow",
    BEV_LIGHT_GREEN: "light_green",
    BEV_PEDESTRIAN: "pedestrian",
    BEV_OBSTACLE: "obstacle",
}
BEV_PALETTE = np.zeros((256, 3), dtype=np.uint8)
for _id, _rgb in {
    BEV_EMPTY: (20, 20, 20),
    BEV_ROAD: (110, 110, 110),
    BEV_LANE_MARKING: (240, 240, 240),
    BEV_VEHICLE: (40, 90, 230),
    BEV_EGO: (250, 250, 60),
    BEV_LIGHT_RED: (230, 30, 30),
    BEV_LIGHT_YELLOW: (250, 190, 20),
    BEV_LIGHT_GREEN: (30, 200, 60),
    BEV_PEDESTRIAN: (230, 60, 200),
    BEV_OBSTACLE: (250, 130, 20),
}.items():
    BEV_PALETTE[_id] = _rgb
