"""README 'Use with kvpress': the example runs (kvpress venv only)."""

from tests.integrations.readme_blocks import blocks, run_block


def test_readme_kvpress_example_runs(tmp_path, monkeypatch, capsys):
    (source,) = blocks("kvpress")
    run_block(source, "kvpress example", tmp_path, monkeypatch)
    assert capsys.readouterr().out.splitlines() == ["39", "torch.Size([1, 72])"]
