"""One object per API client: what every KubeApi built on the same ApiClient shares (its server's
reachability, its server's clock), held no longer than the client itself."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerClient(Generic[T]):
    """`of(api_client)`: the one T made for that client (by `make`, on first use)."""

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._found: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, api_client: Any) -> T:
        with self._lock:
            found = self._found.get(api_client)
            if found is None:
                found = self._found[api_client] = self._make(api_client)
            return found
