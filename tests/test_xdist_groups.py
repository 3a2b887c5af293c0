"""The pytest-xdist groups of tests/conftest.py are applied: tests that share a module fixture run on one worker.

pytest-xdist 3.8 marks a grouped test by appending ``@GROUP`` to its node id; under pytest 9, which no longer reads
the attribute it rewrites, the suffix is missing and every worker makes the shared setup again (pyproject.toml pins
pytest < 9 for that reason).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared_setup() -> int:
    """A module fixture: its users form the group ``module-tests.test_xdist_groups``."""
    return 1


def test_a_test_with_a_module_fixture_is_scheduled_in_its_group(
    shared_setup: int, request: pytest.FixtureRequest
) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set on pytest-xdist's workers under loadgroup
        pytest.skip("groups apply on pytest-xdist's workers under --dist loadgroup only (-n 0 runs one process)")
    assert request.node.nodeid.endswith("@module-tests.test_xdist_groups"), request.node.nodeid
