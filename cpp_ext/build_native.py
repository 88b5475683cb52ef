"""Build the torch C++ extensions of the enforcer, in place, against the installed torch.

* ``enforcer._native`` (``cpp_ext/enforcer/*.cpp``): the ``p2enforcer``
  ``c10d::Backend`` in C++ (passthrough, trace ring buffer, plan dispatch);
* ``enforcer._ucc`` (``cpp_ext/ucc/*.cpp``): pybind11 bindings to UCC's C API
  and the UCC inner backend, linked against the UCC that
  ``cpp_ext/ucc/build_ucc.sh`` built (``--ucc PREFIX``).

Run by ``scripts/setup.sh`` after torch is installed (torch is not a
build-time requirement of the package, so ``pip install`` cannot build these).
Each extension is optional: one that fails to build is reported on one line
and the enforcer falls back (``P2_ENFORCER_IMPL=python``, no UCC). Rebuilds
only what changed (setuptools compares timestamps; objects in ``build/native``).

    python cpp_ext/build_native.py [--ucc PREFIX] [--only native|ucc]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# cpp_ext/enforcer/ must not shadow the enforcer package, and torch must not import
# the backend (the torch.backends entry point) while its extension is being built.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "cpp_ext"]
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
CPP = ROOT / "cpp_ext"
FLAGS = ["-O3", "-std=c++20", "-fvisibility=hidden"]


def _headers(folder: str) -> list[str]:
    """The headers a change of which rebuilds the extension in ``folder``: its own and the shared ones."""
    return sorted(str(p.relative_to(ROOT)) for p in [*(CPP / folder).glob("*.hpp"), *(CPP / "include").rglob("*.hpp")])


def _extensions(ucc_prefix: str | None, only: str | None):
    from torch.utils.cpp_extension import CppExtension

    exts = []
    if only in (None, "native"):
        exts.append(CppExtension(
            "enforcer._native", sorted(str(p.relative_to(ROOT)) for p in (CPP / "enforcer").glob("*.cpp")),
            include_dirs=[str(CPP / "enforcer"), str(CPP / "include")], extra_compile_args=FLAGS,
            depends=_headers("enforcer")))
    if only in (None, "ucc") and ucc_prefix:
        prefix = Path(ucc_prefix)
        exts.append(CppExtension(
            "enforcer._ucc", sorted(str(p.relative_to(ROOT)) for p in (CPP / "ucc").glob("*.cpp")),
            include_dirs=[str(CPP / "ucc"), str(CPP / "include"), str(prefix / "include")], extra_compile_args=FLAGS,
            library_dirs=[str(prefix / "lib")], libraries=["ucc"],
            extra_link_args=[f"-Wl,-rpath,{prefix / 'lib'}"],
            depends=_headers("ucc")))
    return exts


def build(ucc_prefix: str | None = None, only: str | None = None, verbose: bool = False) -> dict[str, str]:
    """Build each extension; returns ``{module: "ok" | one-line error}``."""
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension

    os.chdir(ROOT)
    os.environ.setdefault("MAX_JOBS", os.environ.get("P2_BUILD_JOBS", str(os.cpu_count() or 1)))
    results = {}
    for ext in _extensions(ucc_prefix, only):
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                setup(name=ext.name, ext_modules=[ext], cmdclass={"build_ext": BuildExtension},
                      script_args=["-q", "build_ext", "--inplace", "--build-temp", f"build/native/{ext.name}"])
            results[ext.name] = "ok"
        except (SystemExit, Exception) as error:  # noqa: BLE001 — reported, the build of the other goes on
            text = log.getvalue()
            first = next((line for line in text.splitlines() if "error" in line.lower()), str(error))
            results[ext.name] = first.strip()[:300]
            if verbose:
                sys.stderr.write(text)
        if verbose and results[ext.name] == "ok":
            sys.stderr.write(log.getvalue())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ucc", metavar="PREFIX", help="the UCC install prefix (cpp_ext/ucc/build_ucc.sh prints it)")
    parser.add_argument("--only", choices=("native", "ucc"))
    parser.add_argument("-v", "--verbose", action="store_true", help="print the compiler output")
    args = parser.parse_args(argv)
    failed = False
    for name, result in build(args.ucc, args.only, args.verbose).items():
        if result != "ok":
            failed = True
            print(f"build_native: {name} not built: {result}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
