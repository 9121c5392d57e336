"""Loading libcolibri and declaring its C ABI (include/colibri.h) for ctypes.

Search order of :func:`load_library`:

1. ``$COLIBRI_LIB_PATH``: a library file, or a directory holding ``libcolibri.so.0`` /
   ``libcolibri.so`` (``libcolibri.dylib`` / ``colibri.dll`` elsewhere). When the variable is set,
   it must work: a wrong value raises instead of silently loading another copy.
2. The package directory (``colibri/``), for wheels that ship the library next to the code.
3. The system: ``ctypes.util.find_library("colibri")``, then ``libcolibri.so.0``.

Every function of the header gets ``argtypes`` and ``restype`` here; nothing else in the package
calls an undeclared symbol.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import numbers
import os
import sys
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_float,
    c_int32,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = [
    "ABI_VERSION",
    "ColibriError",
    "Library",
    "LibraryNotFoundError",
    "Status",
    "get_library",
    "load_library",
]

#: The ABI major version this binding was written against (COLIBRI_ABI_VERSION).
ABI_VERSION = 0

#: File names of the library inside a directory, most specific first.
if sys.platform == "darwin":
    _LIB_NAMES: Tuple[str, ...] = ("libcolibri.0.dylib", "libcolibri.dylib")
elif sys.platform == "win32":
    _LIB_NAMES = ("colibri.dll", "libcolibri.dll")
else:
    _LIB_NAMES = ("libcolibri.so.0", "libcolibri.so")


class Status(enum.IntEnum):
    """``colibri_status`` values (frozen numbers of the C ABI)."""

    OK = 0
    INVALID_ARGUMENT = 1
    NULL_ARGUMENT = 2
    IO = 3
    INVALID_MODEL = 4
    UNSUPPORTED = 5
    BUFFER_TOO_SMALL = 6
    CONTEXT_FULL = 7
    PANIC = 8
    BAD_STRUCT_SIZE = 9


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
    """libcolibri could not be found or loaded (the message lists what was tried)."""


# ---------------------------------------------------------------------------------------------
# Structs (mirrors of include/colibri.h; the *_init functions set struct_size and defaults)
# ---------------------------------------------------------------------------------------------


class SamplerParams(Structure):
    """``colibri_sampler_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repetition_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("max_tokens", c_int32),
        ("ignore_eos", c_int32),
        ("seed", c_uint64),
    ]


class ModelParams(Structure):
    """``colibri_model_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("use_mmap", c_int32),
        ("use_mlock", c_int32),
    ]


class ModelInfoStruct(Structure):
    """``colibri_model_info``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("family", c_int32),
        ("vocab_size", c_uint32),
        ("n_ctx_train", c_uint32),
        ("hidden_size", c_uint32),
        ("n_layers", c_uint32),
        ("n_experts", c_uint32),
        ("top_k", c_uint32),
        ("n_params", c_uint64),
        ("n_active_params", c_uint64),
        ("bos_token", c_int32),
        ("eos_token", c_int32),
    ]


class SessionParams(Structure):
    """``colibri_session_params``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("n_ctx", c_uint32),
        ("kv_type", c_int32),
        ("all_logits", c_int32),
        ("routing_mode", c_int32),
        ("moe_top_k", c_int32),
        ("seed", c_uint64),
    ]


class Params(Structure):
    """``colibri_params`` (for ``colibri_init``)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("use_mmap", c_int32),
        ("use_mlock", c_int32),
        ("n_ctx", c_uint32),
        ("kv_type", c_int32),
        ("all_logits", c_int32),
        ("routing_mode", c_int32),
        ("moe_top_k", c_int32),
        ("seed", c_uint64),
    ]


class ChatMessage(Structure):
    """``colibri_chat_message`` (two NUL-terminated UTF-8 strings)."""

    _fields_ = [("role", c_char_p), ("content", c_char_p)]


#: ``colibri_token_callback``: (userdata, token, text, text_len) -> int. ``text`` is declared as
#: a void pointer because it is not NUL-terminated (read it with ctypes.string_at(text, len)).
TokenCallback = CFUNCTYPE(c_int32, c_void_p, c_int32, c_void_p, c_size_t)

#: ``colibri_route_callback``: (userdata, layer, position, experts, weights, k) -> int.
RouteCallback = CFUNCTYPE(c_int32, c_void_p, c_int32, c_int32, POINTER(c_int32), POINTER(c_float), c_size_t)

# Opaque handles travel as void pointers.
_handle = c_void_p
_status = c_int32

#: name -> (restype, argtypes): every exported function of include/colibri.h.
_PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "colibri_version": (c_char_p, []),
    "colibri_abi_version": (c_uint32, []),
    "colibri_sampler_params_init": (None, [POINTER(SamplerParams)]),
    "colibri_generate": (
        _status,
        [_handle, POINTER(c_int32), c_size_t, POINTER(SamplerParams), TokenCallback, c_void_p,
         POINTER(c_int32), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_model_params_init": (None, [POINTER(ModelParams)]),
    "colibri_model_info_init": (None, [POINTER(ModelInfoStruct)]),
    "colibri_model_open": (_status, [c_char_p, POINTER(ModelParams), POINTER(_handle)]),
    "colibri_model_free": (None, [_handle]),
    "colibri_model_get_info": (_status, [_handle, POINTER(ModelInfoStruct)]),
    "colibri_model_user_metadata": (_status, [_handle, POINTER(POINTER(c_uint8)), POINTER(c_size_t)]),
    "colibri_moe_init": (
        _status,
        [POINTER(_handle), POINTER(c_float), POINTER(c_int32), c_int32, c_int32, c_int32],
    ),
    "colibri_moe_infer": (_status, [_handle, POINTER(c_float), POINTER(c_float), POINTER(c_float)]),
    "colibri_moe_free": (None, [_handle]),
    "colibri_last_error_message": (c_char_p, []),
    "colibri_last_error_message_copy": (c_size_t, [POINTER(c_char), c_size_t]),
    "colibri_debug_panic": (_status, []),
    "colibri_session_params_init": (None, [POINTER(SessionParams)]),
    "colibri_params_init": (None, [POINTER(Params)]),
    "colibri_session_new": (_status, [_handle, POINTER(SessionParams), POINTER(_handle)]),
    "colibri_session_free": (None, [_handle]),
    "colibri_init": (_status, [c_char_p, POINTER(Params), POINTER(_handle)]),
    "colibri_infer": (_status, [_handle, POINTER(c_int32), c_size_t, POINTER(c_float), c_size_t]),
    "colibri_infer_batch": (
        _status,
        [_handle, POINTER(_handle), POINTER(POINTER(c_int32)), POINTER(c_size_t), c_size_t, POINTER(c_float),
         c_size_t],
    ),
    "colibri_infer_embeddings": (
        _status,
        [_handle, POINTER(c_float), c_size_t, c_size_t, POINTER(c_float), c_size_t],
    ),
    "colibri_free": (None, [_handle]),
    "colibri_session_reset": (_status, [_handle]),
    "colibri_session_truncate": (_status, [_handle, c_size_t]),
    "colibri_session_position": (_status, [_handle, POINTER(c_size_t), POINTER(c_size_t)]),
    "colibri_session_set_routing": (_status, [_handle, c_int32, c_uint64, c_int32]),
    "colibri_session_set_route_callback": (_status, [_handle, RouteCallback, c_void_p]),
    "colibri_status_str": (c_char_p, [c_int32]),
    "colibri_tokenize": (
        _status,
        [_handle, c_void_p, c_size_t, c_int32, POINTER(c_int32), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_detokenize": (
        _status,
        [_handle, POINTER(c_int32), c_size_t, c_int32, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    ),
    "colibri_chat_render": (
        _status,
        [_handle, POINTER(ChatMessage), c_size_t, c_int32, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    ),
}


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
        abi = cdll.colibri_abi_version()
        if abi != ABI_VERSION:
            raise LibraryNotFoundError(
                f"{path!r} implements ABI {abi}; this binding needs ABI {ABI_VERSION}"
            )

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

    def sampler_params(self) -> SamplerParams:
        p = SamplerParams()
        self.colibri_sampler_params_init(ctypes.byref(p))
        return p

    def model_params(self) -> ModelParams:
        p = ModelParams()
        self.colibri_model_params_init(ctypes.byref(p))
        return p

    def model_info_struct(self) -> ModelInfoStruct:
        p = ModelInfoStruct()
        self.colibri_model_info_init(ctypes.byref(p))
        return p

    def session_params(self) -> SessionParams:
        p = SessionParams()
        self.colibri_session_params_init(ctypes.byref(p))
        return p

    def params(self) -> Params:
        p = Params()
        self.colibri_params_init(ctypes.byref(p))
        return p

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


# ---------------------------------------------------------------------------------------------
# Argument checks shared by the wrappers: wrong types raise TypeError / ValueError in Python,
# before anything reaches C.
# ---------------------------------------------------------------------------------------------

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]; TypeError for non-integers (bool included), ValueError out
    of range."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value.__index__())
    if not lo <= v <= hi:
        raise ValueError(f"{name} = {v} is outside [{lo}, {hi}]")
    return v


def check_float(name: str, value: Any) -> float:
    """`value` as a float; TypeError for non-numbers (bool, str, None)."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """`value` as a bool; accepts bool, 0/1 ints and numpy bools."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def encode_path(path: Any) -> bytes:
    """A filesystem path as NUL-free bytes for C."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path must be str, bytes or os.PathLike, not {type(path).__name__}")
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise ValueError("path contains a NUL byte")
    return raw


def encode_text(name: str, text: Any, allow_nul: bool = True) -> bytes:
    """`text` (str) as UTF-8; TypeError for non-str, ValueError (UnicodeEncodeError) for lone
    surrogates, ValueError for NUL when the C side needs a C string."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, not {type(text).__name__}")
    raw = text.encode("utf-8")
    if not allow_nul and b"\0" in raw:
        raise ValueError(f"{name} contains a NUL character")
    return raw


def int32_array(name: str, ids: Any) -> Tuple[Any, int]:
    """Token ids as a C int32 array: (ctypes array or None, count). Accepts a sequence of ints or
    an integer numpy array; TypeError for anything else, ValueError for ids outside int32."""
    import array

    if isinstance(ids, (str, bytes, bytearray)) or ids is None:
        raise TypeError(f"{name} must be a sequence of ints, not {type(ids).__name__}")
    if hasattr(ids, "dtype") and hasattr(ids, "ndim"):  # numpy array
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, not {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {ids.shape}")
        if ids.size and (int(ids.min()) < INT32_MIN or int(ids.max()) > INT32_MAX):
            raise ValueError(f"{name} holds ids outside int32")
        ids = ids.tolist()
    try:
        seq = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, not {type(ids).__name__}") from None
    for i, v in enumerate(seq):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"{name}[{i}] must be an int, not {type(v).__name__}")
    try:
        arr = array.array("i", [v.__index__() for v in seq])
    except OverflowError:
        raise ValueError(f"{name} holds ids outside int32") from None
    if arr.itemsize != 4:  # pragma: no cover - C int is 32-bit on every supported platform
        arr = array.array("l", seq)
    n = len(arr)
    if n == 0:
        return None, 0
    return (c_int32 * n).from_buffer(arr), n


def as_int32_ptr(buf: Any) -> Any:
    """A POINTER(c_int32) to a ctypes array, or NULL for None."""
    if buf is None:
        return None
    return ctypes.cast(buf, POINTER(c_int32))


def callable_or_none(name: str, fn: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be callable or None, not {type(fn).__name__}")
    return fn


def float_rows(name: str, data: Any, width: int) -> Tuple[Any, int, int, Any]:
    """Rows of floats as a C float array: (ctypes array, n_rows, row_width, keep-alive).

    Accepts a numpy array (1-D = one row, 2-D = rows) or, without numpy, a sequence of floats
    (one row) or a sequence of sequences."""
    if isinstance(data, (str, bytes, bytearray)) or data is None:
        raise TypeError(f"{name} must be an array of floats, not {type(data).__name__}")
    try:
        import numpy as np  # noqa: F401
    except ImportError:  # pragma: no cover - exercised only without numpy
        np = None  # type: ignore[assignment]
    if np is not None:
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name}: {e}") from None
        if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
            raise TypeError(f"{name} must hold numbers, not {arr.dtype}")
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 1-D (one row) or 2-D (rows), got shape {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        n, w = arr.shape
        if n == 0 or w == 0:
            return None, n, w, arr
        return arr.ctypes.data_as(POINTER(c_float)), n, w, arr
    import array

    rows: Sequence[Any] = list(data)
    if rows and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rows):
        rows = [rows]
    flat = array.array("f")
    w = -1
    for r in rows:
        if isinstance(r, (str, bytes)):
            raise TypeError(f"{name} rows must be sequences of floats")
        r = list(r)
        if w == -1:
            w = len(r)
        elif len(r) != w:
            raise ValueError(f"{name} rows have different lengths")
        for v in r:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must hold numbers, not {type(v).__name__}")
        flat.extend(float(v) for v in r)
    n = len(rows)
    if n == 0 or w <= 0:
        return None, n, max(w, 0), flat
    return (c_float * len(flat)).from_buffer(flat), n, w, flat
