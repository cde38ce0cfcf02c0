"""Shared plumbing for every mindsim stage: the one engine layer that talks to LLMs, recipe loading,
prompt rendering, atomic I/O and provenance. Imports nothing else of ours, so `validation` can use it
without depending on the simulator."""

__version__ = "0.1.0"
