"""Loading libcolibri: COLIBRI_LIB_PATH as a file and as a directory, the search order, the
version and status helpers, and the panic boundary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import colibri
from colibri import _lib
from colibri._constants import COLIBRI_SEED_RANDOM

from conftest import INSTALLED, PYTHON_DIR, RELEASE, REPO


def _lib_file() -> Path:
    for name in _lib._LIB_NAMES:
        if (RELEASE / name).is_file():
            return RELEASE / name
    pytest.fail(f"no libcolibri in {RELEASE}")


def test_env_var_file_form(monkeypatch: pytest.MonkeyPatch) -> None:
    f = _lib_file()
    monkeypatch.setenv("COLIBRI_LIB_PATH", str(f))
    lib = _lib.load_library()
    assert lib.path == str(f)
    assert lib.version == colibri.__version__
    assert lib.abi_version == colibri.ABI_VERSION


def test_env_var_directory_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLIBRI_LIB_PATH", str(RELEASE))
    lib = _lib.load_library()
    assert Path(lib.path).parent == RELEASE
    assert Path(lib.path).name in _lib._LIB_NAMES


def test_env_var_that_does_not_work_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLIBRI_LIB_PATH", str(tmp_path / "nope.so"))
    with pytest.raises(colibri.LibraryNotFoundError, match="does not exist"):
        _lib.load_library()
    monkeypatch.setenv("COLIBRI_LIB_PATH", str(tmp_path))  # a directory without the library
    with pytest.raises(colibri.LibraryNotFoundError, match="directory without"):
        _lib.load_library()
    bogus = tmp_path / "libcolibri.so.1"
    bogus.write_bytes(b"not a shared object")
    with pytest.raises(colibri.LibraryNotFoundError, match="cannot load"):
        _lib.load_library()


def test_explicit_path_argument() -> None:
    assert _lib.load_library(str(RELEASE)).version == colibri.version()
    assert _lib.load_library(str(_lib_file())).version == colibri.version()


def test_search_order_package_dir_then_system(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "libcolibri.so.1").symlink_to(_lib_file())
    c = _lib.candidate_paths(env=None, package_dir=str(pkg))
    assert c[0] == str(pkg / "libcolibri.so.1")
    assert c[-1] == "libcolibri.so.1"  # the system loader's name (the SONAME), last
    c = _lib.candidate_paths(env=str(RELEASE), package_dir=str(pkg))
    assert Path(c[0]).parent == RELEASE


def test_package_dir_is_used_without_env(tmp_path: Path) -> None:
    """A copy of the package with the library inside it loads that library, env unset."""
    import shutil

    pkg = tmp_path / "colibri"
    shutil.copytree(PYTHON_DIR / "colibri", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(_lib_file(), pkg / "libcolibri.so.1")
    env = {k: v for k, v in os.environ.items() if k != "COLIBRI_LIB_PATH"}
    env["PYTHONPATH"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", "import colibri; print(colibri.library_path())"],
        env=env, capture_output=True, text=True, check=True, cwd=str(tmp_path),
    )
    assert out.stdout.strip() == str(pkg / "libcolibri.so.1")


@pytest.mark.skipif(not INSTALLED, reason="tests the installed wheel (scripts/test-python.sh)")
def test_the_installed_package_carries_its_library() -> None:
    """`pip install ./python` put the library built by cargo inside the package, and that is
    the one loaded: no COLIBRI_LIB_PATH, not the source tree's package."""
    assert "COLIBRI_LIB_PATH" not in os.environ
    pkg = Path(colibri.__file__).resolve().parent
    assert pkg != (PYTHON_DIR / "colibri").resolve()
    assert Path(colibri.library_path()) == pkg / "libcolibri.so.1"
    assert colibri.abi_version() == colibri.ABI_VERSION
    with colibri.Model(REPO / "models" / "default.colibri") as m, m.session() as s:
        assert s.complete("In the beginning", max_tokens=4, temperature=0).completion_tokens >= 1


def test_every_header_function_is_declared() -> None:
    lib = colibri.get_library()
    header = (REPO / "include" / "colibri.h").read_text()
    import re

    names = set(re.findall(r"\b(colibri_[a-z_]+)\(", header))
    assert names, "no functions found in the header"
    assert names == set(_lib._PROTOTYPES), names ^ set(_lib._PROTOTYPES)
    for n in names:
        fn = getattr(lib, n)
        assert fn.argtypes is not None and hasattr(fn, "restype")


def test_struct_sizes_come_from_the_init_functions() -> None:
    import ctypes

    lib = colibri.get_library()
    for make, cls in [
        (lib.generate_params, _lib.GenerateParams),
        (lib.generate_result, _lib.GenerateResult),
        (lib.model_params, _lib.ModelParams),
        (lib.model_info_struct, _lib.ModelInfoStruct),
        (lib.session_params, _lib.SessionParams),
        (lib.params, _lib.Params),
    ]:
        p = make()
        assert p.struct_size == ctypes.sizeof(cls), cls.__name__
    sp = lib.generate_params()
    assert sp.max_tokens == 128 and abs(sp.temperature - 0.8) < 1e-6 and sp.top_k == 40
    assert sp.n_stop == 0 and not sp.stop
    ses = lib.session_params()
    assert (ses.routing_seed, ses.quant_act) == (COLIBRI_SEED_RANDOM, colibri.QUANT_ACTS["default"])
    assert sp.seed == COLIBRI_SEED_RANDOM == 2**64 - 1
    mp = lib.model_params()
    assert (mp.use_mmap, mp.use_mlock) == (1, 0)


def test_version_and_status_strings() -> None:
    assert colibri.version() == colibri.__version__
    assert colibri.abi_version() == 1 == colibri.ABI_VERSION
    assert colibri.status_str(colibri.Status.IO) == "I/O error"
    assert colibri.status_str(12345) == "unknown status"
    assert colibri.status_name(3) == "IO" and colibri.status_name(99) == "UNKNOWN(99)"


def test_debug_panic_is_caught_and_the_process_lives_on(model: colibri.Model) -> None:
    for _ in range(3):
        with pytest.raises(colibri.ColibriError) as e:
            colibri.debug_panic()
        assert e.value.status == colibri.Status.PANIC
        assert e.value.status_name == "PANIC"
        assert "colibri_debug_panic" in e.value.message
    # Still alive and working.
    assert model.detokenize(model.tokenize("still alive")) == "still alive"


def test_bad_struct_size_is_reported() -> None:
    import ctypes

    lib = colibri.get_library()
    p = lib.model_params()
    p.struct_size = 9999
    h = ctypes.c_void_p()
    st = lib.colibri_model_open(b"/nonexistent", ctypes.byref(p), ctypes.byref(h))
    err = lib.error(st)
    assert err.status == colibri.Status.BAD_STRUCT_SIZE
    assert "struct_size" in err.message
    assert not h.value


def test_the_library_file_name_carries_the_abi() -> None:
    if sys.platform.startswith("linux"):
        assert _lib._LIB_NAMES == ("libcolibri.so.1", "libcolibri.so")
    assert str(colibri.ABI_VERSION) in _lib._LIB_NAMES[0] or sys.platform == "win32"


def test_a_library_of_another_abi_is_refused(tmp_path: Path) -> None:
    """A stand-in library that says ABI 0 (what libcolibri.so.0 says) is refused by its version,
    before the missing ABI-1 functions are even looked for."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "old.c"
    src.write_text("unsigned colibri_abi_version(void) { return 0; }\n")
    so = tmp_path / "libcolibri.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    with pytest.raises(colibri.LibraryNotFoundError, match=r"implements ABI 0; this binding needs ABI 1"):
        _lib.load_library(str(so))
    with pytest.raises(colibri.LibraryNotFoundError, match=r"ABI 0"):
        _lib.load_library(str(tmp_path))  # the directory form finds it by its name
