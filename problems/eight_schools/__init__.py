"""Eight schools (Rubin 1981; MIF paper App. D.1)."""

from problems.eight_schools.problem import EightSchools

__all__ = ["EightSchools"]
