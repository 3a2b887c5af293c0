"""Stored references: the ground truth of problems without exact answers, read, validated and described
(:mod:`.references`). The reference engine (:mod:`suite.reference`) writes them.
"""
