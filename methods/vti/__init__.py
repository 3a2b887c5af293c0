"""VTI: variational transdimensional inference with CoSMIC flows (registers ``vti-surrogate`` and ``vti-mcg``).

The public face: the two methods, the training each run starts from (:meth:`VTISurrogate.untrained`) and the
optimiser that trains it, for studies and diagnostics that train another way.
"""

from methods.vti.method import VTIMCG, Training, VTISurrogate
from methods.vti.training import Trainer, TrainSettings

__all__ = ["VTIMCG", "TrainSettings", "Trainer", "Training", "VTISurrogate"]
