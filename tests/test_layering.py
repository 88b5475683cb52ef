"""The planning core is pure: it imports nothing of the shell, no I/O frameworks, no torch.distributed."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL = {"catalog.py", "settings.py"}
FORBIDDEN = ("click", "grpc", "fastapi", "redis", "torch", "pydantic_settings", "sqlite3", "socket",
             "optimizer_service.cli", "optimizer_service.catalog", "optimizer_service.settings")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_modules_import_nothing_of_the_shell():
    core = [p for p in (ROOT / "optimizer_service").glob("*.py") if p.name not in SHELL]
    assert len(core) >= 10
    for path in core:
        for module in imported_modules(path):
            assert not module.startswith(FORBIDDEN), f"{path.name} imports {module}"


def test_repository_floor():
    for folder in ("proto", "optimizer_service", "enforcer", "cpp_ext", "deploy", "tests", "benchmarks", "examples"):
        assert (ROOT / folder).is_dir(), folder
    for placeholder in ("proto", "enforcer", "cpp_ext", "deploy"):
        assert (ROOT / placeholder / "README.md").read_text().strip()
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line for line in readme[:6] if line.startswith("scripts/")]
    assert [c.split()[0] for c in commands] == ["scripts/run.sh", "scripts/test.sh"]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
