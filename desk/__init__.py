"""The operator desk: the admin's home page "Today", the occupancy timeline, the order and
fleet pages that compose the apps, and /healthz. Above the domain apps; nothing imports it."""
