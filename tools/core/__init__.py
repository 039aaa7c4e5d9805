"""The base every package may import: the command line, errors, presets, atomic files, locks, bounded
reads and SLURM job states. Imports nothing of ours."""
