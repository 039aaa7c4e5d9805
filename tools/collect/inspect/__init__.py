"""Read-only looks at a dataset root: the quality report, info and the dataset card, frame pictures, Py123D export."""
