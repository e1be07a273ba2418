"""Compatibility: which CUDA releases a driver runs (cuda.py), precompiled images, profiles.
May import: core.report, core.model."""
