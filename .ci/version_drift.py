"""Print the installed distributions whose versions differ from a constraints file.

CI installs the newest releases; .ci/constraints.txt records the versions of the last run that
passed.  When a run fails, these lines say which dependencies changed since then, so a
dependency change is told apart from a regression (rerun with KVMM_CI_PINNED=1 to confirm).
"""

from __future__ import annotations

import sys
from importlib import metadata


def pinned(path: str) -> dict[str, str]:
    out = {}
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[canonical(name)] = version.strip()
    return out


def canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def main(path: str) -> int:
    want = pinned(path)
    have = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    changed = [(n, want[n], have[n]) for n in sorted(want) if n in have and have[n] != want[n]]
    new = sorted(n for n in have if n not in want and n not in ("kvmm", "pip", "setuptools", "wheel"))
    if not changed and not new:
        print(f"dependency versions: as in {path} (the last passing run)")
        return 0
    print(f"dependency versions that differ from {path} (the last passing run):")
    for name, old, now in changed:
        print(f"  {name}: {old} -> {now}")
    for name in new:
        print(f"  {name}: not in the last passing run ({have[name]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".ci/constraints.txt"))
