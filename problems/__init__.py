"""Built-in benchmark problems; importing this package registers them."""

from problems import sas  # noqa: F401  (registers "sas")
