"""The layering of ARCHITECTURE.md, checked on every module's imports.

* Pure packages (``plan``, ``hardware``, ``p2``, ``syndicate``, ``control``,
  ``resharding`` and the shared ``errors``/``units``) import no shell module
  and no I/O library, and read no environment.
* Dependencies point one way: shell → syndicate → p2 → hardware → plan
  (``resharding`` → hardware, plan; ``control`` → plan).
* The enforcer imports only ``optimizer_service.plan``, the participant's
  decisions in ``optimizer_service.control``, the metrics module and the
  generated contract ``p2.v1``.
* ``deploy`` imports nothing of ``optimizer_service``; ``p2`` (the generated
  contract and its loader) imports nothing of ours.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "optimizer_service"
SHARED = ("optimizer_service.errors", "optimizer_service.units")
#: What each pure package may import of ours, besides itself and SHARED.
ALLOWED = {
    "plan": (),
    "hardware": ("plan",),
    "p2": ("hardware", "plan"),
    "syndicate": ("p2", "hardware", "plan"),
    "resharding": ("hardware", "plan"),
    "control": ("plan",),
}
IO_LIBRARIES = ("os", "sys", "subprocess", "socket", "sqlite3", "shutil", "tempfile", "pathlib", "threading",
                "multiprocessing", "asyncio", "logging", "torch", "grpc", "fastapi", "starlette", "uvicorn",
                "redis", "click", "pydantic_settings", "prometheus_client", "requests", "urllib", "http",
                "matplotlib", "enforcer", "deploy")


def imports_of(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names), with its line; relative
    imports are resolved against ``package`` (by default the file's own)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            if base == "optimizer_service":      # "from optimizer_service import plan" names a package
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def pure_modules() -> list[tuple[str, Path]]:
    found = [(package, path) for package in ALLOWED for path in modules(PACKAGE / package)]
    return found + [("shared", PACKAGE / "errors.py"), ("shared", PACKAGE / "units.py")]


def test_every_pure_package_exists_with_a_docstring():
    for package in ALLOWED:
        init = PACKAGE / package / "__init__.py"
        assert init.is_file(), f"optimizer_service/{package}/ is missing"
        assert ast.get_docstring(ast.parse(init.read_text())), f"optimizer_service/{package}/__init__.py has no docstring"


@pytest.mark.parametrize("package,path", pure_modules(), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_pure_modules_import_only_what_their_layer_may(package, path):
    own = [] if package == "shared" else [f"optimizer_service.{package}"]
    allowed = [*own, *SHARED, *(f"optimizer_service.{p}" for p in ALLOWED.get(package, ()))]
    for line, name in imports_of(path):
        where = f"{path.relative_to(ROOT)}:{line} imports {name}"
        assert not any(under(name, lib) for lib in IO_LIBRARIES), where + " (an I/O library or the shell)"
        if under(name, "optimizer_service") and name != "optimizer_service":
            assert any(under(name, prefix) for prefix in allowed), where + f" (may import {allowed})"


@pytest.mark.parametrize("package,path", pure_modules(), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_pure_modules_read_no_environment(package, path):
    text = path.read_text()
    for needle in ("os.environ", "getenv", "open("):
        assert needle not in text, f"{path.relative_to(ROOT)} uses {needle}"


def test_the_enforcer_imports_only_the_plan_contract_and_metrics():
    allowed = ("optimizer_service.plan", "optimizer_service.control", "optimizer_service.metrics")
    for path in modules(ROOT / "enforcer"):
        for line, name in imports_of(path):
            if under(name, "optimizer_service") and name != "optimizer_service":
                assert any(under(name, prefix) for prefix in allowed), f"{path.relative_to(ROOT)}:{line} imports {name}"


def test_the_dashboard_calls_the_service_core_only():
    """The dashboard is a thin HTTP shell over ``service`` (as the gRPC servicers
    are): it may import the service, the plan values, errors and metrics."""
    allowed = ("optimizer_service.dashboard", "optimizer_service.service", "optimizer_service.plan",
               "optimizer_service.errors", "optimizer_service.metrics")
    for path in modules(PACKAGE / "dashboard"):
        for line, name in imports_of(path):
            if under(name, "optimizer_service") and name != "optimizer_service":
                assert any(under(name, prefix) for prefix in allowed), f"{path.relative_to(ROOT)}:{line} imports {name}"


def test_the_generated_contract_imports_nothing_of_ours():
    for path in modules(ROOT / "p2"):
        for line, name in imports_of(path):
            assert not any(under(name, ours) for ours in ("optimizer_service", "enforcer", "deploy")), \
                f"{path.relative_to(ROOT)}:{line} imports {name}"


def test_deploy_imports_nothing_of_the_optimizer():
    for path in modules(ROOT / "deploy"):
        for line, name in imports_of(path):
            assert not under(name, "optimizer_service"), f"{path.relative_to(ROOT)}:{line} imports {name}"


P2_READ = re.compile(r"""(os\.environ(\.get)?\s*[\[(]|getenv\s*\()\s*["']P2_""")


def test_p2_settings_are_read_only_by_the_settings_objects():
    """``P2_*`` variables are read in two places: the service's settings (the
    CLI builds it once) and the enforcer's (read at registration); everything
    else gets the values passed down."""
    readers = {ROOT / "optimizer_service" / "settings.py", ROOT / "enforcer" / "settings.py"}
    found = []
    for folder in ("optimizer_service", "enforcer", "deploy"):
        for path in modules(ROOT / folder):
            if path not in readers and P2_READ.search(path.read_text()):
                found.append(str(path.relative_to(ROOT)))
    assert not found, f"read P2_* from the environment outside the settings objects: {found}"
    assert P2_READ.search('x = os.environ.get("P2_CLUSTER_DIR")') and P2_READ.search("os.getenv('P2_X')")


def test_the_checker_sees_a_violation(tmp_path):
    """The rules above can fail: an import of the shell is found, relative or not."""
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom optimizer_service.cli import app\nfrom ..syndicate import mcmc\n")
    names = [name for _, name in imports_of(sample, "optimizer_service.plan")]
    assert names[:2] == ["os", "optimizer_service.cli"]
    assert "optimizer_service.syndicate" in names


def test_repository_floor():
    for folder in ("proto", "optimizer_service", "enforcer", "cpp_ext", "deploy", "tests", "benchmarks", "examples"):
        assert (ROOT / folder).is_dir(), folder
    for placeholder in ("proto", "enforcer", "cpp_ext", "deploy"):
        assert (ROOT / placeholder / "README.md").read_text().strip()
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line for line in readme[:6] if line.startswith("scripts/")]
    assert [c.split()[0] for c in commands] == ["scripts/run.sh", "scripts/test.sh"]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
