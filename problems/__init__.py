"""Built-in benchmark problems; importing this package registers them."""

from problems import linear_dag, sas  # noqa: F401  (registers "linear-dag", "linear-dag-d4", "sas")
