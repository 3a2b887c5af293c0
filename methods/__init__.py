"""Built-in methods; importing this package registers them."""

from methods import rjmcmc  # noqa: F401  (registers "rjmcmc-baseline", "rjmcmc-naive")
