"""This machine's side of the wire: submitting a job to a cluster and following it (``jobs``), and
staging a dataset on a cluster's store once (``datasets``). What runs on the cluster, and the
contract both sides read (the job's configuration and events, the store's files), is
``burst.runtime``."""
