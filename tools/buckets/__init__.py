"""The buckets stage: index the frames of finished route runs into behaviour buckets and collections."""
