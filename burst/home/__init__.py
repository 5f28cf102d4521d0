"""What burst keeps on this machine and the files users hand it.

The state directory (``~/.burst``, ``BURST_HOME``: clusters, runs, staged datasets), written
atomically under file locks and read back through one checking loader (``records``), and the
reading of user files (policies, gates, search spaces, catalogs) with one clear line when they are
wrong (``userfile``).
"""
