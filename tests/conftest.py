"""Test-wide settings.

Hypothesis profiles: ``default`` (used by CI and the README command) keeps the whole suite
inside its time budget on a 2-core machine; ``thorough`` (``HYPOTHESIS_PROFILE=thorough``)
runs many more examples for local bug hunting.  Deadlines are off: the first example of a test
may include numba compilation.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# pytester: tests/testing/test_contract_suites_fail_on_broken.py runs the contract suites on broken code.
pytest_plugins = ["pytester"]
