"""Placement: where a run should go, decided from data (the policy, the price catalog, the
workload's measured profile) and, where it may ask, from a site's scheduler (its queue now);
``sources`` answer what each kind of target can run, ``planner.plan`` ranks every candidate and
``planner.pin`` is the same plan restricted to one target; ``filters`` holds what every flag and
policy rule keeps, one predicate each. The
price lists a catalog refresh reads are asked only by ``burst catalog refresh``."""
