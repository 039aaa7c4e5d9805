"""The embedded world's sensors: a town's static scene and the numpy renderer (cameras, LiDAR, BEV)."""
