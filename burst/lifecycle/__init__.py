"""A run's life on this side, from submission to its record: train (``runs``), scan (``scans``),
the run's directory here (``rundir``), the budget guard, the quality gate, calibration from
measured runs, and a recorded run or scan refreshed from its cluster (``tracking``).
"""
