"""The on-disk contract shared by every stage: paths, schemas, readers and writers, atomic writes."""
