"""The README's two commands are what a newcomer copies; CI must run the
test command exactly as written there."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("```sh", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_starts_with_two_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert commands[0].endswith("rcuda demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_exactly():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in [line.strip() for line in ci]
