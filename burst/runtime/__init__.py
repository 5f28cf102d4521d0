"""The runtime: the training job that runs on a cluster (``entry``, with the Ray Train and TPU
drivers), and the contract between it and this machine (``job``: its configuration, events and
files; ``storage``: the stores both sides read). This machine's side of the wire, submitting and
following a job and staging its data, is ``burst.client``."""
