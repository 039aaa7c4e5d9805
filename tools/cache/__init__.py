"""The cache stage: preprocess every frame of every finished route run once into ROOT/cache/<key>/."""
