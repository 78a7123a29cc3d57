"""Test helpers shipped with kvmm: Hypothesis state machines and simple models of its structures.

Modules here import Hypothesis (a test dependency); import them from tests only.
"""
