"""Where things are, for tests that read the repository's files (docs, README, kvmm's sources, bench/).

The tests tree mirrors the package (tests/<package>/...), so a test's depth says nothing about
where the repository root is: take it from here."""

from pathlib import Path

#: the repository root (the folder with pyproject.toml)
ROOT = Path(__file__).resolve().parents[1]
