"""The layering of ARCHITECTURE.md, checked on every module's imports.

Imports are read from the source (tests/support/imports.py): function-local
ones count, ``from package import name`` counts as an import of the submodule
``package.name`` where there is one, and imports under ``if TYPE_CHECKING:``
count for the directions below but are no run-time edge of an import circle.

* No import circle among the project's modules (``optimizer_service``,
  ``enforcer``, ``deploy``, ``p2``, ``benchmarks``); none is exempt.
* Pure packages (``plan``, ``hardware``, ``p2``, ``syndicate``, ``control``,
  ``resharding`` and the shared ``errors``/``units``) import no shell module
  and no I/O library, and read no environment.
* Dependencies point one way: shell → syndicate → p2 → hardware → plan
  (``resharding`` → hardware, plan; ``control`` → plan).
* The contract both planes share, ``optimizer_service.wire``, imports of ours
  only ``plan``, ``errors``, ``units`` and the generated ``p2``: nothing of
  the service, the dashboard, the CLI or the enforcer.
* The enforcer imports of ours only ``optimizer_service.plan``, the
  participant's decisions in ``optimizer_service.control``, the metrics
  module, the contract ``optimizer_service.wire`` and the generated ``p2.v1``.
* The enforcer's rooms (its subpackages, each with a docstring) import
  downward only, as :data:`ROOMS` lists; every room may import the top
  modules at the floor (:data:`FLOOR`), which import no room; the package,
  its API and the composition root (:data:`ROOF`) may import anything.
* The dashboard calls the service core only (and may use the contract).
* ``deploy`` imports nothing of ``optimizer_service``; ``p2`` (the contract's
  Python, made at build time) imports nothing of ours.
* ``P2_*`` variables are read only by the two settings objects.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.imports import SourceTree, circles, source_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "optimizer_service"
#: The project's top-level packages: what "ours" means below.
OURS = ("optimizer_service", "enforcer", "deploy", "p2", "benchmarks")
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
#: What the contract package may import of ours (I/O libraries are its business).
WIRE_MAY_IMPORT = ("optimizer_service.wire", "optimizer_service.plan", "optimizer_service.errors",
                   "optimizer_service.units", "p2")
#: What the enforcer may import of ours, besides itself.
ENFORCER_MAY_IMPORT = ("optimizer_service.plan", "optimizer_service.control", "optimizer_service.metrics",
                       "optimizer_service.wire", "p2.v1")
#: The enforcer's rooms → the rooms each may import besides itself (the floor aside).
ROOMS = {
    "comm": (),
    "runtime": ("comm",),
    "group": ("runtime", "comm"),
    "link": ("runtime", "comm"),      # the group only through a Protocol of its own
    "programs": ("comm",),
    "reshard": ("comm",),
    "pipeline": ("reshard", "comm"),
    "measure": ("programs", "reshard", "comm"),
}
#: Top modules of the enforcer every room may import; they import only each other
#: (``_native`` and ``_ucc`` are the compiled extensions).
FLOOR = ("settings", "state", "groups", "trace", "host_cpu", "_native", "_ucc")
#: Top modules that may import anything of the enforcer: the package itself
#: (``""``), its public API and the composition root.
ROOF = ("", "api", "register")


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def pure_modules() -> list[tuple[str, Path]]:
    found = [(package, path) for package in ALLOWED for path in source_files(PACKAGE / package)]
    return found + [("shared", PACKAGE / "errors.py"), ("shared", PACKAGE / "units.py")]


@pytest.fixture(scope="module")
def tree() -> SourceTree:
    return SourceTree(ROOT, OURS)


def circle_violations(tree: SourceTree) -> list[str]:
    """Every import circle among the tree's modules, as ``a → b → a`` with its lines."""
    graph = tree.graph()
    return [tree.describe(graph, circle) for circle in circles(graph)]


def outside_violations(tree: SourceTree, folder: str, may_import: tuple[str, ...]) -> list[str]:
    """Imports of ours by the modules under ``folder`` that are not under its own
    package nor under one of ``may_import``."""
    own = folder.replace("/", ".")
    found = []
    for path in source_files(tree.root / folder):
        for imported in tree.imports_of(path):
            ours = any(under(imported.name, package) for package in OURS)
            if ours and not any(under(imported.name, prefix) for prefix in (own, *may_import)):
                found.append(f"{path.relative_to(tree.root)}:{imported.line} imports {imported.name}")
    return found


def place_of(module: str) -> str:
    """``enforcer.group.core`` → ``group``; ``enforcer.state`` → ``state``; ``enforcer`` → ``""``."""
    return module.split(".")[1] if "." in module else ""


def room_violations(tree: SourceTree) -> list[str]:
    """Enforcer modules that import a room above them, and rooms or top modules the table does not name."""
    found = []
    enforcer = tree.root / "enforcer"
    for folder in sorted(p for p in enforcer.iterdir() if p.is_dir() and source_files(p)):
        if folder.name not in ROOMS:
            found.append(f"enforcer/{folder.name}/ is no room of ROOMS")
    for path in source_files(enforcer):
        relative = path.relative_to(tree.root)
        place = place_of(".".join(relative.with_suffix("").parts).removesuffix(".__init__"))
        if place in ROOF:
            continue
        if place in ROOMS:
            allowed, where = (place, *ROOMS[place], *FLOOR), f"room {place}"
        elif place in FLOOR:
            allowed, where = FLOOR, "the floor"
        else:
            if path.parent == enforcer:        # a file of a folder that is no room is reported above
                found.append(f"{relative} is neither a room nor a top module of FLOOR or ROOF")
            continue
        for imported in tree.imports_of(path):
            if under(imported.name, "enforcer") and place_of(imported.name) not in allowed:
                found.append(f"{relative}:{imported.line} imports {imported.name}, "
                             f"above {where} (it may import {', '.join(allowed)})")
    return found


def room_docstring_violations(root: Path) -> list[str]:
    """Enforcer subpackages without an ``__init__.py`` or without its docstring."""
    found = []
    for folder in sorted(p for p in (root / "enforcer").iterdir() if p.is_dir() and source_files(p)):
        for package in [folder, *(p for p in folder.rglob("*") if p.is_dir() and source_files(p))]:
            init = package / "__init__.py"
            if not init.is_file():
                found.append(f"{init.relative_to(root)} is missing")
            elif not ast.get_docstring(ast.parse(init.read_text())):
                found.append(f"{init.relative_to(root)} has no docstring")
    return found


def test_no_import_circle(tree):
    """A circle is closed by whichever import runs last (often a function-local
    one), so it works until someone imports its modules in another order."""
    found = circle_violations(tree)
    assert not found, "import circles:\n" + "\n".join(found)


def test_every_pure_package_exists_with_a_docstring():
    for package in ALLOWED:
        init = PACKAGE / package / "__init__.py"
        assert init.is_file(), f"optimizer_service/{package}/ is missing"
        assert ast.get_docstring(ast.parse(init.read_text())), f"optimizer_service/{package}/__init__.py has no docstring"


@pytest.mark.parametrize("package,path", pure_modules(), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_pure_modules_import_only_what_their_layer_may(tree, package, path):
    own = [] if package == "shared" else [f"optimizer_service.{package}"]
    allowed = [*own, *SHARED, *(f"optimizer_service.{p}" for p in ALLOWED.get(package, ()))]
    for imported in tree.imports_of(path):
        name = imported.name
        where = f"{path.relative_to(ROOT)}:{imported.line} imports {name}"
        assert not any(under(name, lib) for lib in IO_LIBRARIES), where + " (an I/O library or the shell)"
        if under(name, "optimizer_service") and name != "optimizer_service":
            assert any(under(name, prefix) for prefix in allowed), where + f" (may import {allowed})"


@pytest.mark.parametrize("package,path", pure_modules(), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_pure_modules_read_no_environment(package, path):
    text = path.read_text()
    for needle in ("os.environ", "getenv", "open("):
        assert needle not in text, f"{path.relative_to(ROOT)} uses {needle}"


def test_the_contract_imports_neither_plane(tree):
    init = PACKAGE / "wire" / "__init__.py"
    assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), \
        "optimizer_service/wire/ is missing or its __init__.py has no docstring"
    found = outside_violations(tree, "optimizer_service/wire", WIRE_MAY_IMPORT)
    assert not found, f"the contract may import of ours only {WIRE_MAY_IMPORT}: {found}"


def test_the_enforcer_imports_only_the_plan_contract_and_metrics(tree):
    found = outside_violations(tree, "enforcer", ENFORCER_MAY_IMPORT)
    assert not found, f"the enforcer may import of ours only {ENFORCER_MAY_IMPORT}: {found}"


def test_the_enforcers_rooms_import_downward_only(tree):
    found = room_violations(tree)
    assert not found, "\n".join(found)


def test_every_enforcer_room_is_a_package_with_a_docstring():
    assert sorted(p.name for p in (ROOT / "enforcer").iterdir() if p.is_dir() and source_files(p)) == sorted(ROOMS)
    found = room_docstring_violations(ROOT)
    assert not found, found


def test_the_dashboard_calls_the_service_core_only(tree):
    """The dashboard is a thin HTTP shell over ``service`` (as the gRPC servicers
    are): it may import the service, the plan values, errors, metrics and the contract."""
    allowed = ("optimizer_service.dashboard", "optimizer_service.service", "optimizer_service.plan",
               "optimizer_service.errors", "optimizer_service.metrics", "optimizer_service.wire")
    for path in source_files(PACKAGE / "dashboard"):
        for imported in tree.imports_of(path):
            name = imported.name
            if under(name, "optimizer_service") and name != "optimizer_service":
                assert any(under(name, prefix) for prefix in allowed), \
                    f"{path.relative_to(ROOT)}:{imported.line} imports {name}"


def test_the_generated_contract_imports_nothing_of_ours(tree):
    for path in source_files(ROOT / "p2"):
        for imported in tree.imports_of(path):
            assert not any(under(imported.name, ours) for ours in ("optimizer_service", "enforcer", "deploy")), \
                f"{path.relative_to(ROOT)}:{imported.line} imports {imported.name}"


def test_deploy_imports_nothing_of_the_optimizer(tree):
    for path in source_files(ROOT / "deploy"):
        for imported in tree.imports_of(path):
            assert not under(imported.name, "optimizer_service"), \
                f"{path.relative_to(ROOT)}:{imported.line} imports {imported.name}"


P2_READ = re.compile(r"""(os\.environ(\.get)?\s*[\[(]|getenv\s*\()\s*["']P2_""")


def test_p2_settings_are_read_only_by_the_settings_objects():
    """``P2_*`` variables are read in two places: the service's settings (the
    CLI builds it once) and the enforcer's (read at registration); everything
    else gets the values passed down."""
    readers = {ROOT / "optimizer_service" / "settings.py", ROOT / "enforcer" / "settings.py"}
    found = []
    for folder in ("optimizer_service", "enforcer", "deploy"):
        for path in source_files(ROOT / folder):
            if path not in readers and P2_READ.search(path.read_text()):
                found.append(str(path.relative_to(ROOT)))
    assert not found, f"read P2_* from the environment outside the settings objects: {found}"
    assert P2_READ.search('x = os.environ.get("P2_CLUSTER_DIR")') and P2_READ.search("os.getenv('P2_X')")


def sample_tree(root: Path, files: dict[str, str]) -> SourceTree:
    """A tree of the given files (path → text) under ``root``, of our packages."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return SourceTree(root, [p for p in OURS if (root / p).is_dir()])


def test_the_checker_sees_a_violation(tmp_path):
    """The rules above can fail: an import of the shell is found, relative or not,
    and ``from package import module`` names the module."""
    tree = sample_tree(tmp_path, {
        "optimizer_service/__init__.py": "",
        "optimizer_service/cli/__init__.py": "",
        "optimizer_service/syndicate/__init__.py": "",
        "optimizer_service/plan/__init__.py": "",
        "optimizer_service/plan/sample.py": "import os\nfrom optimizer_service.cli import app\n"
                                            "from ..syndicate import mcmc\nfrom optimizer_service import cli\n",
    })
    names = [found.name for found in tree.imports_of(tmp_path / "optimizer_service/plan/sample.py")]
    assert names == ["os", "optimizer_service.cli.app", "optimizer_service.syndicate.mcmc", "optimizer_service.cli"]


def test_the_checker_resolves_names_to_modules(tmp_path):
    """``from p import n`` names ``p.n`` where ``n`` is a module of the tree or a
    name ``p/__init__.py`` does not bind (a compiled extension), else ``p``."""
    tree = sample_tree(tmp_path, {
        "enforcer/__init__.py": "from enforcer.api import attach\nif True:\n    LIMIT = 1\n",
        "enforcer/api.py": "",
        "enforcer/state.py": "from enforcer import api, attach, _native, LIMIT\n",
    })
    names = [found.name for found in tree.imports_of(tmp_path / "enforcer/state.py")]
    assert names == ["enforcer", "enforcer._native", "enforcer.api"]


def test_the_checker_sees_a_circle(tmp_path):
    """A circle closed by a function-local ``from package import module`` is
    found and shown as a chain; a typing-only import closes none."""
    tree = sample_tree(tmp_path, {
        "enforcer/__init__.py": "",
        "enforcer/group/__init__.py": '"""Groups."""\n',
        "enforcer/group/core.py": "def start():\n    from enforcer.link import link\n",
        "enforcer/link/__init__.py": '"""Link."""\n',
        "enforcer/link/link.py": "from enforcer.runtime import plan_groups\n",
        "enforcer/runtime/__init__.py": '"""Runtime."""\n',
        "enforcer/runtime/plan_groups.py": "from enforcer.group.core import start\n",
    })
    found = circle_violations(tree)
    assert len(found) == 1
    assert found[0].splitlines()[0] == ("enforcer.group.core → enforcer.link.link → enforcer.runtime.plan_groups"
                                        " → enforcer.group.core")
    assert "enforcer/group/core.py:2 imports enforcer.link.link" in found[0]

    (tmp_path / "enforcer/runtime/plan_groups.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from enforcer.group.core import start\n")
    assert circle_violations(SourceTree(tmp_path, ["enforcer"])) == []


def test_the_checker_sees_a_room_importing_upward(tmp_path):
    tree = sample_tree(tmp_path, {
        "enforcer/__init__.py": "from enforcer import api\n",
        "enforcer/api.py": "from enforcer.link import session\nfrom enforcer.group import core\n",
        "enforcer/settings.py": "from enforcer.comm import inner\n",
        "enforcer/trace.py": "from enforcer import settings, _native\n",
        "enforcer/stray.py": "",
        "enforcer/group/__init__.py": '"""Groups."""\n',
        "enforcer/group/core.py": "from enforcer import link, state\nfrom enforcer.runtime import plan_runtime\n",
        "enforcer/link/__init__.py": '"""Link."""\n',
        "enforcer/link/session.py": "from enforcer.group.core import GroupCore\nfrom enforcer.comm import inner\n",
        "enforcer/comm/__init__.py": '"""Comm."""\n',
        "enforcer/comm/inner.py": "import enforcer\n",
        "enforcer/runtime/__init__.py": '"""Runtime."""\n',
        "enforcer/runtime/plan_runtime.py": "from enforcer.comm.inner import create\n",
        "enforcer/spare/__init__.py": "",
    })
    found = room_violations(tree)
    assert found == [
        "enforcer/spare/ is no room of ROOMS",
        "enforcer/comm/inner.py:1 imports enforcer, above room comm (it may import comm, "
        "settings, state, groups, trace, host_cpu, _native, _ucc)",
        "enforcer/group/core.py:1 imports enforcer.link, above room group (it may import group, runtime, comm, "
        "settings, state, groups, trace, host_cpu, _native, _ucc)",
        "enforcer/link/session.py:1 imports enforcer.group.core, above room link (it may import link, runtime, "
        "comm, settings, state, groups, trace, host_cpu, _native, _ucc)",
        "enforcer/settings.py:1 imports enforcer.comm.inner, above the floor (it may import settings, state, "
        "groups, trace, host_cpu, _native, _ucc)",
        "enforcer/stray.py is neither a room nor a top module of FLOOR or ROOF",
    ]
    assert room_docstring_violations(tmp_path) == ["enforcer/spare/__init__.py has no docstring"]
    (tmp_path / "enforcer/group/__init__.py").unlink()
    assert room_docstring_violations(tmp_path) == ["enforcer/group/__init__.py is missing",
                                                   "enforcer/spare/__init__.py has no docstring"]


def test_the_checker_sees_a_plane_reaching_across(tmp_path):
    """The enforcer importing the service, and the contract importing either plane, are found."""
    tree = sample_tree(tmp_path, {
        "enforcer/__init__.py": "",
        "enforcer/link.py": "from optimizer_service.wire import limits\nfrom optimizer_service.service import core\n"
                            "from p2.v1 import plan_pb2\nimport deploy\nimport grpc\n",
        "optimizer_service/__init__.py": "",
        "optimizer_service/wire/__init__.py": "",
        "optimizer_service/wire/limits.py": "import grpc\nfrom optimizer_service.units import MiB\n"
                                            "from optimizer_service.dashboard import auth\nimport enforcer\n",
        "p2/__init__.py": "",
        "p2/v1/__init__.py": "",
    })
    assert outside_violations(tree, "enforcer", ENFORCER_MAY_IMPORT) == [
        "enforcer/link.py:2 imports optimizer_service.service", "enforcer/link.py:4 imports deploy"]
    assert outside_violations(tree, "optimizer_service/wire", WIRE_MAY_IMPORT) == [
        "optimizer_service/wire/limits.py:3 imports optimizer_service.dashboard",
        "optimizer_service/wire/limits.py:4 imports enforcer"]


def test_repository_floor():
    for folder in ("proto", "optimizer_service", "enforcer", "cpp_ext", "deploy", "tests", "benchmarks", "examples"):
        assert (ROOT / folder).is_dir(), folder
    for placeholder in ("proto", "enforcer", "cpp_ext", "deploy"):
        assert (ROOT / placeholder / "README.md").read_text().strip()
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line for line in readme[:6] if line.startswith("scripts/")]
    assert [c.split()[0] for c in commands] == ["scripts/run.sh", "scripts/test.sh"]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
