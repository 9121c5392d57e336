"""The wheel build: compiles libcolibri with cargo and ships it inside the package as
``colibri/libcolibri.so.1`` (the file :mod:`colibri._lib` looks for next to itself), in a wheel
tagged ``py3-none-<platform>``: any Python 3, no Python C-API (the binding is ctypes), one
platform. Everything else (name, version, packages) is in pyproject.toml.

Environment:

* ``CARGO_TARGET_DIR``: cargo's output directory (relative to the repository root), as for
  ``cargo build``: point it at an existing release build and nothing compiles twice. The
  default ``target/`` is the one ``cargo build --release`` at the repository root fills.
* ``CARGO``: the cargo executable (default ``cargo`` on PATH, else ``~/.cargo/bin/cargo``).
* ``COLIBRI_WHEEL_LIB``: a libcolibri file to ship instead of building one (packagers, or a
  build without the Rust source tree).
* ``COLIBRI_WHEEL_STRIP=0``: keep the library's debug information (stripped by default when
  ``strip`` is on PATH: about a fifth of the size).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ABI_VERSION = 1  # the SONAME suffix; colibri._abi.ABI_VERSION and include/colibri.h agree

if sys.platform == "darwin":
    BUILT, SHIPPED = "libcolibri.dylib", f"libcolibri.{ABI_VERSION}.dylib"
elif sys.platform == "win32":
    BUILT, SHIPPED = "colibri.dll", "colibri.dll"
else:
    BUILT, SHIPPED = "libcolibri.so", f"libcolibri.so.{ABI_VERSION}"


def _cargo() -> str:
    cargo = os.environ.get("CARGO") or shutil.which("cargo")
    if not cargo:
        home = Path.home() / ".cargo" / "bin" / "cargo"
        cargo = str(home) if home.is_file() else ""
    if not cargo:
        raise RuntimeError("building the colibri wheel needs cargo (https://rustup.rs), or "
                           "COLIBRI_WHEEL_LIB=/path/to/libcolibri.so to ship a built library")
    return cargo


def build_library() -> Path:
    """The library to ship: $COLIBRI_WHEEL_LIB, else cargo's release build of the crate."""
    given = os.environ.get("COLIBRI_WHEEL_LIB")
    if given:
        path = Path(given)
        if not path.is_file():
            raise RuntimeError(f"COLIBRI_WHEEL_LIB={given!r} is not a file")
        return path
    if not (REPO / "Cargo.toml").is_file():
        raise RuntimeError(f"no colibri source tree at {REPO} (build the wheel from a checkout: "
                           "pip install ./python), or set COLIBRI_WHEEL_LIB")
    # The same command as the repository's release build (every default member, default
    # features), so that an existing build in the same target directory is reused as it is.
    cmd = [_cargo(), "build", "--release", "--manifest-path", str(REPO / "Cargo.toml")]
    print("colibri: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or "target")
    lib = (target if target.is_absolute() else REPO / target) / "release" / BUILT
    if not lib.is_file():
        raise RuntimeError(f"cargo built no {lib}")
    return lib


def ship(lib: Path, dest: Path) -> None:
    """Copy `lib` to `dest`, stripped of debug information unless COLIBRI_WHEEL_STRIP=0."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lib, dest)
    os.chmod(dest, 0o755)
    strip = shutil.which("strip")
    if strip and os.environ.get("COLIBRI_WHEEL_STRIP", "1") != "0" and sys.platform.startswith("linux"):
        subprocess.run([strip, "--strip-debug", str(dest)], check=True)


class BuildPyWithLibrary(build_py):
    """build_py, then libcolibri into the built package."""

    def run(self) -> None:
        super().run()
        if not self.dry_run:
            ship(build_library(), Path(self.build_lib) / "colibri" / SHIPPED)


class BinaryDistribution(Distribution):
    """A distribution with a native library: installed to platlib, in a non-pure wheel."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for one platform (it carries a native library) but any Python 3 (ctypes only)."""

    def get_tag(self) -> "tuple[str, str, str]":
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
