"""Checks: measure until decided, the one place that joins measuring (`perfgate.measure`) and judging
(`perfgate.judge`).
"""
