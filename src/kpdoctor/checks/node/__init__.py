"""Checks of the node itself: conditions that lose packets (seed 004)."""

from kpdoctor.checks.node import firewall as firewall  # registered here: checks/__init__ lists the others
