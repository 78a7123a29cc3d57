"""Tests of kvmm.integrations that need no engine installed (the main run collects them).

The tests against the real engines are in tests/integrations/, which the main run does not
collect (pyproject.toml's norecursedirs): .ci/run runs each engine's files in that engine's venv.
"""
