"""Orchestration: one attempt of a route run, local worker processes, SLURM waves, progress, the manifest record."""
