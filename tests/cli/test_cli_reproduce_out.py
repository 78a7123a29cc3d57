"""``kvmm reproduce --out``: an unusable output folder is a one-line error before any section runs."""

import os

import pytest

import kvmm.reproduce
from kvmm.cli import main


@pytest.fixture
def no_section_may_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a section ran although --out is unusable")

    monkeypatch.setattr(kvmm.reproduce, "run_sections", refuse)


def _unusable_outs(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    outs = {"under /proc": "/proc/kvmm-report-test", "a file": str(a_file), "under a file": str(a_file / "out")}
    if os.geteuid() != 0:  # root writes anywhere
        read_only = tmp_path / "ro"
        read_only.mkdir(mode=0o500)
        outs["read-only"] = str(read_only)
    return outs


def test_an_unusable_out_folder_fails_first_with_one_line(tmp_path, capsys, no_section_may_run):
    for what, out in _unusable_outs(tmp_path).items():
        assert main(["reproduce", "--only", "vtoken", "--no-progress", "--out", out]) == 2, what
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"kvmm reproduce: error: --out {out!r}: cannot"), what
        assert captured.out == "", what


def test_a_new_nested_out_folder_is_created_before_the_run(tmp_path, monkeypatch):
    seen = []
    out = tmp_path / "new" / "nested"
    monkeypatch.setattr(kvmm.reproduce, "run_sections", lambda report, only=None: seen.append(out.is_dir()) or [])
    assert main(["reproduce", "--only", "vtoken", "--no-progress", "--out", str(out)]) == 0
    assert seen == [True] and sorted(p.name for p in out.iterdir()) == ["report-only-vtoken.md"]
