"""Sinh-arcsinh two-model toy (TRJ sec. 4.1)."""

from problems.sas.problem import SinhArcsinh

__all__ = ["SinhArcsinh"]
