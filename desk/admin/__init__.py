"""The desk's own admin pages: those that compose what several apps know of one thing, the
order (its payment, access and report) and the fleet (hosts and lots, with their host keys
and acceptance figures). Each app's own models are in its own admin module."""

from desk.admin import fleet, orders  # noqa: F401  (each registers its admin pages)
