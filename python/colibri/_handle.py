"""Ownership of one C handle: close() (idempotent, also from __del__), context-manager support,
and a use counter so close() never frees a handle another thread is inside a call with."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from ._lib import ColibriError, Library, Status


class OwnedHandle:
    """Base of Model, Session and MoeLayer.

    * ``close()`` frees the C object once; later calls do nothing. ``__del__`` calls it.
    * Using a closed object raises ``ColibriError`` (status ``NULL_ARGUMENT``: the handle is gone).
    * ``close()`` waits for calls in flight on other threads to return.
    """

    _kind = "object"

    def __init__(self, lib: Library, handle: int, free: Callable[[Any], None]) -> None:
        self._lib = lib
        self._handle: Optional[int] = handle
        self._free: Optional[Callable[[Any], None]] = free
        self._cond = threading.Condition(threading.Lock())
        self._users = 0
        self._owner: Optional[int] = None  # thread of the exclusive user, if any
        self._closing = False  # close() is waiting: no new users

    # -- use ---------------------------------------------------------------------------------

    def _closed_error(self) -> ColibriError:
        return ColibriError(Status.NULL_ARGUMENT, f"this {self._kind} is closed")

    @contextmanager
    def _shared(self) -> Iterator[int]:
        """The live handle, for calls the C ABI allows concurrently (const pointers)."""
        with self._cond:
            if self._handle is None or self._closing:
                raise self._closed_error()
            self._users += 1
            h = self._handle
        try:
            yield h
        finally:
            self._release()

    def _acquire_exclusive(self) -> int:
        """Take the handle for a call that must not overlap any other (a session's calls)."""
        with self._cond:
            if self._handle is None or self._closing:
                raise self._closed_error()
            if self._users:
                raise ColibriError(
                    Status.BUSY,
                    f"this {self._kind} is busy: another call (a running generate() iterator, "
                    "a callback, or another thread) is using it; a session serves one call at a time",
                )
            self._users = 1
            self._owner = threading.get_ident()
            return self._handle

    def _set_owner(self, ident: Optional[int]) -> None:
        """Hand an exclusive use over to another thread (the one that will release it)."""
        with self._cond:
            self._owner = ident

    def _release(self) -> None:
        with self._cond:
            self._users -= 1
            if self._users == 0:
                self._owner = None
                self._cond.notify_all()

    @contextmanager
    def _exclusive(self) -> Iterator[int]:
        h = self._acquire_exclusive()
        try:
            yield h
        finally:
            self._release()

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return getattr(self, "_handle", None) is None

    def _before_close(self) -> None:
        """Hook: ask calls in flight to finish early (Session stops a running generation)."""

    def close(self) -> None:
        """Free the C object. Idempotent; waits for calls in flight on other threads."""
        cond = getattr(self, "_cond", None)
        if cond is None:  # __init__ failed before the handle existed
            return
        self._before_close()
        with cond:
            if self._handle is None:
                return
            if self._users and self._owner == threading.get_ident():
                raise ColibriError(
                    Status.INVALID_ARGUMENT,
                    f"cannot close this {self._kind} from inside one of its own calls (a callback)",
                )
            self._closing = True
            while self._users:
                cond.wait()
            self._closing = False
            h, free = self._handle, self._free
            self._handle = None
            self._free = None
        if free is not None:
            free(h)

    def __enter__(self) -> Any:
        if self.closed:
            raise self._closed_error()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # never raise from a finaliser
            pass
