"""Measuring: trial processes, devices, the machine probe, samplers, profiles, the lab and paired sessions.

Builds records (`perfgate.records`); never judges them.
"""
