# "1er décembre 2026" (see config/formats/__init__.py); the rest as Django's French formats.
DATE_FORMAT = "jS F Y"
DATETIME_FORMAT = "jS F Y H:i"
