"""Build of the optional C++ extension ``optimizer_service.syndicate._schedule_cpp``
(sources in cpp_ext/, see cpp_ext/README.md); everything else about the
package is in pyproject.toml. ``optional=True``: where it cannot be compiled
the install still succeeds and the planner uses its pure-Python scheduler."""

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("P2_BUILD_JOBS").install()   # the sources compile side by side (all cores unless set)

SOURCES = ["cpp_ext/problem_graph.cpp", "cpp_ext/schedule_module.cpp"]
HEADERS = ["cpp_ext/list_scheduler.hpp", "cpp_ext/problem_graph.hpp", "cpp_ext/rank_set.hpp",
           "cpp_ext/successor_graph.hpp"]

setup(
    ext_modules=[Pybind11Extension(
        "optimizer_service.syndicate._schedule_cpp", SOURCES, depends=HEADERS, include_dirs=["cpp_ext"], cxx_std=17,
        # Times must match the Python scheduler bit for bit: no contraction into fused multiply-adds.
        extra_compile_args=["-O3", "-ffp-contract=off"], optional=True)],
    cmdclass={"build_ext": build_ext},
)
