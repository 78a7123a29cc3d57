"""Build hook: the built package records the git commit it was built from.

Everything else is in pyproject.toml.  ``build_py`` writes ``kvmm/_build_info.py``
(``GIT_COMMIT = "<sha>[+dirty]"``, or ``None`` outside a checkout) into the build folder only, so
a non-editable ``pip install .`` from a checkout reports its commit in ``kvmm reproduce``'s
header (:func:`kvmm.report.git_commit`); the source tree is not changed.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _checkout_commit():
    # kvmm/_git.py by path: importing the kvmm package would need numpy inside the build environment
    spec = importlib.util.spec_from_file_location("_kvmm_git", ROOT / "kvmm" / "_git.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.checkout_commit(ROOT)


class BuildPyRecordingCommit(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "kvmm" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text('"""Written by setup.py when this copy of kvmm was built."""\n\n'
                          f"GIT_COMMIT = {_checkout_commit()!r}\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPyRecordingCommit})
