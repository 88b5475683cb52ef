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
"""

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


class BuildProtos(Command):
    """Generate ``p2/v1/*_pb2*.py`` from ``proto/p2/v1/*.proto`` (a step of ``build``; setuptools'
    build sub-command protocol, ``setuptools.command.build.SubCommand``)."""

    description = "generate p2.v1 from proto/p2/v1/*.proto"
    user_options = []
    editable_mode = False

    def initialize_options(self) -> None:
        self.build_lib = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

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


class BuildWithProtos(build):
    sub_commands = [*build.sub_commands, ("build_protos", None)]


setup(
    ext_modules=[Pybind11Extension(
        "optimizer_service.syndicate._schedule_cpp", SOURCES, depends=HEADERS, include_dirs=["cpp_ext"], cxx_std=17,
        # Times must match the Python scheduler bit for bit: no contraction into fused multiply-adds.
        extra_compile_args=["-O3", "-ffp-contract=off"], optional=True)],
    cmdclass={"build": BuildWithProtos, "build_protos": BuildProtos, "build_ext": build_ext},
)
