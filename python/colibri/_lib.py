"""Loading libcolibri: finding the file, checking its ABI, applying the declarations of
:mod:`colibri._abi` to it, and turning its status codes into :class:`ColibriError`.

Search order of :func:`load_library`:

1. ``$COLIBRI_LIB_PATH``: a library file, or a directory holding ``libcolibri.so.1`` /
   ``libcolibri.so`` (``libcolibri.1.dylib`` / ``colibri.dll`` elsewhere). When the variable is
   set, it must work: a wrong value raises instead of silently loading another copy.
2. The package directory (``colibri/``), for wheels that ship the library next to the code.
3. The system: ``ctypes.util.find_library("colibri")``, then ``libcolibri.so.1``.

The ``1`` is the ABI version (:data:`ABI_VERSION`, the SONAME suffix); a library of another ABI
is refused. Every function of the header gets ``argtypes`` and ``restype``; nothing else in the
package calls an undeclared symbol.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from typing import Any, List, Optional, Tuple

from ._abi import (  # noqa: F401  (the structs are re-exported: colibri._lib.SessionParams, ...)
    ABI_VERSION,
    PROTOTYPES,
    ChatMessage,
    EmbedParams,
    GenerateParams,
    GenerateResult,
    ModelInfoStruct,
    ModelParams,
    MoeParams,
    Params,
    RouteCallback,
    SessionParams,
    Status,
    TokenCallback,
)

__all__ = [
    "ABI_VERSION",
    "ColibriError",
    "Library",
    "LibraryNotFoundError",
    "Status",
    "get_library",
    "load_library",
    "status_name",
]

#: Every declared function (the name tests and older code know).
_PROTOTYPES = PROTOTYPES

#: File names of the library inside a directory, most specific first.
if sys.platform == "darwin":
    _LIB_NAMES: Tuple[str, ...] = (f"libcolibri.{ABI_VERSION}.dylib", "libcolibri.dylib")
elif sys.platform == "win32":
    _LIB_NAMES = ("colibri.dll", "libcolibri.dll")
else:
    _LIB_NAMES = (f"libcolibri.so.{ABI_VERSION}", "libcolibri.so")


def status_name(status: int) -> str:
    """``"INVALID_ARGUMENT"`` for 1, ``"UNKNOWN(42)"`` for a value this binding does not know."""
    try:
        return Status(status).name
    except ValueError:
        return f"UNKNOWN({status})"


class ColibriError(Exception):
    """A failed colibri call: ``status`` (int, a :class:`Status` value), ``status_name`` and the
    library's message (``colibri_last_error_message_copy``, read right after the failing call on
    the calling thread)."""

    status: int
    status_name: str
    message: str

    def __init__(self, status: int, message: str) -> None:
        self.status = int(status)
        self.status_name = status_name(self.status)
        self.message = message
        super().__init__(self.status, message)

    def __str__(self) -> str:
        return f"{self.status_name}: {self.message}" if self.message else self.status_name

    def __repr__(self) -> str:
        return f"ColibriError({self.status_name}, {self.message!r})"


class LibraryNotFoundError(OSError):
    """libcolibri could not be found or loaded, or implements another ABI (the message says
    what was tried)."""


class Library:
    """A loaded libcolibri with every function declared. Model and Session objects hold a
    reference to the Library they were made with, so it outlives them.

    The C functions are attributes of the same name (``lib.colibri_infer(...)``)."""

    path: str
    cdll: ctypes.CDLL

    def __init__(self, path: str) -> None:
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFoundError(f"cannot load libcolibri from {path!r}: {e}") from e
        # The ABI first: a library of another ABI is refused by its version, whatever it exports.
        if hasattr(cdll, "colibri_abi_version"):
            cdll.colibri_abi_version.restype = ctypes.c_uint32
            cdll.colibri_abi_version.argtypes = []
            abi = int(cdll.colibri_abi_version())
            if abi != ABI_VERSION:
                raise LibraryNotFoundError(
                    f"{path!r} implements ABI {abi}; this binding needs ABI {ABI_VERSION} "
                    f"({_LIB_NAMES[0]})"
                )
        missing = [name for name in _PROTOTYPES if not hasattr(cdll, name)]
        if missing:
            raise LibraryNotFoundError(f"{path!r} is not libcolibri (missing {', '.join(missing)})")
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(cdll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        self.path = path
        self.cdll = cdll

    # Typed accessors for the handful of calls used outside this module ---------------------

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - only for type checkers
        raise AttributeError(name)

    @property
    def version(self) -> str:
        """``colibri_version()``, e.g. ``"0.1.0"``."""
        return bytes(self.colibri_version()).decode()

    @property
    def abi_version(self) -> int:
        return int(self.colibri_abi_version())

    def status_str(self, status: int) -> str:
        """``colibri_status_str``: the static description of any status value."""
        return bytes(self.colibri_status_str(int(status))).decode()

    def last_error(self) -> str:
        """The calling thread's last error message (``colibri_last_error_message_copy``)."""
        buf = ctypes.create_string_buffer(256)
        need = self.colibri_last_error_message_copy(buf, len(buf))
        if need > len(buf):
            buf = ctypes.create_string_buffer(need)
            self.colibri_last_error_message_copy(buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def error(self, status: int) -> ColibriError:
        """A ColibriError for `status` with this thread's last message. Call it right after the
        failing call, on the same thread."""
        return ColibriError(status, self.last_error())

    def check(self, status: int) -> None:
        """Raise ColibriError unless `status` is OK."""
        if status != Status.OK:
            raise self.error(status)

    def _filled(self, struct: type, init: str) -> Any:
        """A new ``struct`` filled by ``colibri_<init>_init_sized`` with its ctypes size: the
        library writes only the fields this binding declares, whatever its own struct holds."""
        p = struct()
        self.check(getattr(self, f"colibri_{init}_init_sized")(ctypes.byref(p), ctypes.sizeof(p)))
        return p

    def generate_params(self) -> GenerateParams:
        """A ``colibri_generate_params`` with the library's defaults (no stop strings)."""
        return self._filled(GenerateParams, "generate_params")

    def generate_result(self) -> GenerateResult:
        """A ``colibri_generate_result`` with its struct_size set."""
        return self._filled(GenerateResult, "generate_result")

    def embed_params(self) -> EmbedParams:
        return self._filled(EmbedParams, "embed_params")

    def model_params(self) -> ModelParams:
        return self._filled(ModelParams, "model_params")

    def moe_params(self) -> MoeParams:
        return self._filled(MoeParams, "moe_params")

    def model_info_struct(self) -> ModelInfoStruct:
        return self._filled(ModelInfoStruct, "model_info")

    def session_params(self) -> SessionParams:
        return self._filled(SessionParams, "session_params")

    def params(self) -> Params:
        return self._filled(Params, "params")

    def __repr__(self) -> str:
        return f"<colibri.Library {self.path!r} version {self.version}>"


def _candidates_in_dir(directory: str) -> List[str]:
    return [os.path.join(directory, n) for n in _LIB_NAMES if os.path.isfile(os.path.join(directory, n))]


def candidate_paths(env: Optional[str] = None, package_dir: Optional[str] = None) -> List[str]:
    """The library paths :func:`load_library` tries, in order (without loading anything)."""
    out: List[str] = []
    if env:
        out.extend(_candidates_in_dir(env) if os.path.isdir(env) else [env])
    pkg = package_dir if package_dir is not None else os.path.dirname(os.path.abspath(__file__))
    out.extend(_candidates_in_dir(pkg))
    found = ctypes.util.find_library("colibri")
    if found:
        out.append(found)
    out.append(_LIB_NAMES[0])
    return out


def load_library(path: Optional[str] = None) -> Library:
    """Load libcolibri (a new :class:`Library`; :func:`get_library` caches one).

    `path` (a file or a directory) overrides the search; otherwise ``$COLIBRI_LIB_PATH``, the
    package directory and the system are tried in that order."""
    if path is not None:
        path = os.fspath(path)
        if os.path.isdir(path):
            found = _candidates_in_dir(path)
            if not found:
                raise LibraryNotFoundError(f"no {' or '.join(_LIB_NAMES)} in directory {path!r}")
            return Library(found[0])
        return Library(path)
    env = os.environ.get("COLIBRI_LIB_PATH")
    if env:
        # An explicit setting must work: never fall back to a different copy silently.
        if os.path.isdir(env):
            found = _candidates_in_dir(env)
            if not found:
                raise LibraryNotFoundError(
                    f"COLIBRI_LIB_PATH={env!r} is a directory without {' or '.join(_LIB_NAMES)}"
                )
            return Library(found[0])
        if not os.path.exists(env):
            raise LibraryNotFoundError(f"COLIBRI_LIB_PATH={env!r} does not exist")
        return Library(env)
    errors = []
    for cand in candidate_paths(None):
        try:
            return Library(cand)
        except LibraryNotFoundError as e:
            errors.append(str(e))
    raise LibraryNotFoundError(
        "libcolibri not found; build it with `cargo build --release` and set COLIBRI_LIB_PATH to "
        "target/release (tried: " + "; ".join(errors) + ")"
    )


_cached: Optional[Library] = None
_cache_lock = threading.Lock()


def get_library() -> Library:
    """The process-wide Library, loaded by :func:`load_library` on first use."""
    global _cached
    lib = _cached
    if lib is None:
        with _cache_lock:
            if _cached is None:
                _cached = load_library()
            lib = _cached
    return lib
