"""Checks of the node itself: conditions that lose packets (seed 004)."""
