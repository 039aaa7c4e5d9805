"""Collection: towns, routes, driving them in the embedded world or CARLA (docs/architecture.md)."""
