"""VTI: variational transdimensional inference with CoSMIC flows."""
