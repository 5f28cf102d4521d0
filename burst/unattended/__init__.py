"""What acts while no command line is attached: managed runs' records and their hand-over to a
controller process (``managed``; the controller itself is ``burst.controller``, a client of
``burst.api`` as the command line is), clusters' watchers (idle stop, lease end) and the back-off
both use when a cluster does not answer.
"""
