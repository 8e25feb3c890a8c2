"""Judging: statistics, verdicts and their wording, the diagnosis and the reading of the lab.

Reads records (`perfgate.records`); never runs a measurement.
"""
