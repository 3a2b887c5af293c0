"""Built-in methods; importing this package registers them."""

from methods import rjmcmc  # noqa: F401  (registers "rjmcmc-baseline", "rjmcmc-naive")
from methods.bayesdag import method as _bayesdag  # noqa: F401  (registers "bayesdag")
from methods.bges import method as _bges  # noqa: F401  (registers "bges")
from methods.dagma import method as _dagma  # noqa: F401  (registers "dagma")
from methods.dibs import method as _dibs  # noqa: F401  (registers "dibs")
from methods.mif import method as _mif  # noqa: F401  (registers "mif", "iaf", "fr-vip", "fr", "mf")
from methods.order_mcmc import method as _order_mcmc  # noqa: F401  (registers "order-mcmc")
from methods.trj import method as _trj  # noqa: F401  (registers "trj", "ctrj")
from methods.vti import method as _vti  # noqa: F401  (registers "vti-surrogate", "vti-mcg")
