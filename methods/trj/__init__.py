"""Transport reversible jump (TRJ paper): per-model transports, the TRJ jump and the Bartolucci bridge estimator.

The public face: the two methods (``trj``, ``ctrj``), and the pieces the TRJ studies put together themselves (the
transports, the jumps and the bridge estimate).
"""

from methods.trj.bbe import PairStatistics, bartolucci_model_probs
from methods.trj.flows import ConditionalSplineTransport, SplineTransport
from methods.trj.kernels import JumpRecord, saturated_jump, transport_jump
from methods.trj.method import CTRJ, TRJ
from methods.trj.proposals import LopesWestProposal, ScaledIdentityTransport, independence_jump
from methods.trj.sampler import JumpChooser
from methods.trj.transports import AffineTransport

__all__ = [
    "CTRJ",
    "TRJ",
    "AffineTransport",
    "ConditionalSplineTransport",
    "JumpChooser",
    "JumpRecord",
    "LopesWestProposal",
    "PairStatistics",
    "ScaledIdentityTransport",
    "SplineTransport",
    "bartolucci_model_probs",
    "independence_jump",
    "saturated_jump",
    "transport_jump",
]
