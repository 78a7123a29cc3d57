"""The README's integration examples: fenced as ```python vllm / ```python kvpress so the main
run's README test (plain ```python blocks) leaves them to the venv that has the package."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(tag: str, language: str = "python") -> list[str]:
    return re.findall(rf"```{language} {tag}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def run_block(source: str, name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(source, f"README.md {name}", "exec"), {"__name__": name})
