"""Tuning studies: fits, grids, variants and sweeps that chose a default (bench/studies/README.md)."""
