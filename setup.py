"""The two build steps of the package that are not plain Python; everything else
about it is in pyproject.toml.

* ``p2.v1``, the Python of ``proto/p2/v1/*.proto``: the ``build_protos`` step
  runs ``proto/generate_python.py`` (grpcio-tools, a build requirement) into the
  build folder, so the wheel ships the modules, or into the source tree for
  ``pip install -e .`` (what scripts/setup.sh runs). Importing ``p2.v1`` never
  generates anything.
* The optional C++ extension ``optimizer_service.syndicate._schedule_cpp``
  (sources in cpp_ext/, see cpp_ext/README.md). ``optional=True``: where it
  cannot be compiled the install still succeeds and the planner uses its
  pure-Python scheduler.
* The C++ ``p2enforcer`` backend ``enforcer._native`` (cpp_ext/enforcer/), the
  ``build_torch_ext`` step: built against the torch of the environment the
  package is installed into, so that ``pip install .`` in a training image that
  has torch gives the working backend. torch is not a build requirement (a
  build requirement would be a second torch in pip's isolated build
  environment, not the one the backend must match): the step asks the
  installing interpreter where its torch is and builds with that one. Without
  torch, without a compiler, or with ``P2_SKIP_NATIVE=1`` it says why in one
  line and the install goes on (the enforcer then runs its Python group);
  ``P2_REQUIRE_NATIVE=1`` makes that a failure (image builds). With
  ``P2_UCC_PREFIX`` (a UCC install, cpp_ext/ucc/build_ucc.sh) it also builds
  ``enforcer._ucc``. pip shows the step's lines with ``-v``.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import Command, setup
from setuptools.command.build import build

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "proto"))   # the generator lives beside its sources, outside the package
import generate_python  # noqa: E402

ParallelCompile("P2_BUILD_JOBS").install()   # the sources compile side by side (all cores unless set)

SOURCES = ["cpp_ext/problem_graph.cpp", "cpp_ext/schedule_module.cpp"]
HEADERS = ["cpp_ext/list_scheduler.hpp", "cpp_ext/problem_graph.hpp", "cpp_ext/rank_set.hpp",
           "cpp_ext/successor_graph.hpp"]
GENERATED = "p2/v1"


class BuildStep(Command):
    """A step of ``build`` that writes into ``build_lib``, or the source tree when editable (setuptools'
    build sub-command protocol, ``setuptools.command.build.SubCommand``)."""

    user_options = []
    editable_mode = False

    def initialize_options(self) -> None:
        self.build_lib = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))


class BuildProtos(BuildStep):
    """Generate ``p2/v1/*_pb2*.py`` from ``proto/p2/v1/*.proto``."""

    description = "generate p2.v1 from proto/p2/v1/*.proto"

    def run(self) -> None:
        generate_python.generate(ROOT / GENERATED if self.editable_mode else Path(self.build_lib, GENERATED))

    def get_source_files(self) -> list[str]:
        """What an sdist needs to run this step."""
        return [str(path.relative_to(ROOT)) for path in generate_python.proto_files()] + ["proto/generate_python.py"]

    def get_outputs(self) -> list[str]:
        return [str(Path(self.build_lib, GENERATED, name)) for name in generate_python.OUTPUTS]

    def get_output_mapping(self) -> dict[str, str]:
        """An editable install generates in place: its outputs are files of the source tree."""
        if not self.editable_mode:
            return {}
        return {str(Path(self.build_lib, GENERATED, name)): f"{GENERATED}/{name}" for name in generate_python.OUTPUTS}


class BuildTorchExtensions(BuildStep):
    """Build ``enforcer._native`` (and, with ``P2_UCC_PREFIX``, ``enforcer._ucc``) against the installing
    environment's torch, with torch's own ``BuildExtension`` and the extensions ``cpp_ext/build_native.py``
    declares (the same sources and flags scripts/setup.sh builds). A step of ``build``; never fails the
    build unless ``P2_REQUIRE_NATIVE=1``."""

    description = "build the C++ p2enforcer backend against the installed torch"

    def run(self) -> None:
        if os.environ.get("P2_SKIP_NATIVE") == "1":
            self._say("P2_SKIP_NATIVE=1: the C++ p2enforcer backend is not built (the enforcer runs its Python group)")
            return
        try:
            failures = self._build(_installed_torch())
        except (Exception, SystemExit) as error:  # noqa: BLE001 — the backend is optional (see the module)
            failures = {"enforcer._native": error}
        for name, error in failures.items():
            reason = " ".join(str(error).split())[:400] or type(error).__name__
            self._say(f"{name} was not built: {reason}; the enforcer runs without it (pip install -v shows the "
                      "compiler's output)")
        if failures and os.environ.get("P2_REQUIRE_NATIVE") == "1":
            raise SystemExit(f"p2-collectives: P2_REQUIRE_NATIVE=1 and {', '.join(failures)} not built")

    def _build(self, site: str | None) -> dict[str, BaseException]:
        """Build each extension as build_native.py does (its objects in build/native/NAME, so neither
        rebuilds what the other compiled); the ones that failed, with why."""
        if site is not None and site not in sys.path:
            sys.path.append(site)       # after the build environment's own packages: its setuptools stays first
        native = _build_native_module()
        import torch
        from torch.utils.cpp_extension import BuildExtension

        failures: dict[str, BaseException] = {}
        for extension in native._extensions(os.environ.get("P2_UCC_PREFIX") or None, None):
            command = BuildExtension(self.distribution.__class__({"name": extension.name,
                                                                 "ext_modules": [extension]}))
            command.inplace = self.editable_mode    # editable: beside the sources, where build_native.py puts it
            command.build_lib = self.build_lib
            command.build_temp = str(Path("build", "native", extension.name))
            try:
                command.ensure_finalized()
                command.run()
            except (Exception, SystemExit) as error:  # noqa: BLE001 — reported; the next one is still built
                failures[extension.name] = error
            else:
                self._say(f"{extension.name} built against torch {torch.__version__}")
        return failures

    def get_source_files(self) -> list[str]:
        """What an sdist needs to run this step: build_native.py and the C++ sources it names."""
        sources = [path for folder in ("enforcer", "ucc", "include") for path in (ROOT / "cpp_ext" / folder).rglob("*")
                   if path.suffix in (".cpp", ".hpp")]
        return ["cpp_ext/build_native.py", *sorted(str(path.relative_to(ROOT)) for path in sources)]

    def get_outputs(self) -> list[str]:
        return []

    def _say(self, line: str) -> None:
        print(f"p2-collectives: {line}", file=sys.stderr, flush=True)


def _installed_torch() -> str | None:
    """The folder that holds the installing environment's torch: ``None`` when torch imports here already
    (no build isolation), else the answer of this interpreter without pip's isolation
    (``PYTHONPATH``, ``PYTHONNOUSERSITE``); raises when there is no torch."""
    if importlib.util.find_spec("torch") is not None:
        return None
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"   # an installed p2enforcer must not load while we look
    found = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(os.path.dirname("
                            "torch.__file__)))"], capture_output=True, text=True, env=environment, check=False)
    if found.returncode != 0:
        raise RuntimeError(f"torch is not installed for {sys.executable} (install torch first, then this package)")
    return found.stdout.strip().splitlines()[-1]


def _build_native_module():
    """cpp_ext/build_native.py as a module (it sets TORCH_DEVICE_BACKEND_AUTOLOAD=0 before torch loads)."""
    spec = importlib.util.spec_from_file_location("p2_build_native", ROOT / "cpp_ext" / "build_native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithProtos(build):
    sub_commands = [*build.sub_commands, ("build_protos", None), ("build_torch_ext", None)]


setup(
    ext_modules=[Pybind11Extension(
        "optimizer_service.syndicate._schedule_cpp", SOURCES, depends=HEADERS, include_dirs=["cpp_ext"], cxx_std=17,
        # Times must match the Python scheduler bit for bit: no contraction into fused multiply-adds.
        extra_compile_args=["-O3", "-ffp-contract=off"], optional=True)],
    cmdclass={"build": BuildWithProtos, "build_protos": BuildProtos, "build_torch_ext": BuildTorchExtensions,
              "build_ext": build_ext},
)
