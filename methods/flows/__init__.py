"""The flow library shared by VTI, TRJ/CTRJ and MIF: MADE conditioners, the rational-quadratic spline,
the sigmoid sandwich and affine maps.

* :mod:`methods.flows.made`: degree masks, the MADE conditioner (nflows' residual MADE, the one module that
  imports nflows) with a zero-initialised context shortcut, and MADE+ for mixed categorical/binary variables.
* :mod:`methods.flows.splines`: the monotone rational-quadratic spline of [0, 1] onto itself.
* :mod:`methods.flows.sandwich`: logit o F o sigmoid around a map F of [0, 1].
* :mod:`methods.flows.affine`: positive scales, elementwise scale-and-shift, the Cholesky affine map.
"""
