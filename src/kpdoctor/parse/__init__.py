"""Parsers: raw artifact text in, typed facts plus diagnostics out. A parser never raises."""
