"""The catalog, as data: what each cloud offers and at what price. ``offers`` reads the price table
(``data/catalog.csv``, or the refreshed copy in the state directory), ``facts`` what each cloud
really offers beside it (zones, retired and spot-only shapes, drivers, quotas, the time model's
figures: ``data/facts/<provider>.yaml``), and ``refresh`` renews the table from the providers'
public price lists (``azure_prices``, ``gcp_prices``, fetched through ``price_fetch``). It sits
below the targets and the planner, which both read it."""
