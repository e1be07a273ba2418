"""Watch-fed copies of the collections every pass reads whole: nodes and driver pods.

A pass that LISTs 5,000 nodes decodes ~16 MB of JSON and rebuilds every view, although between two
passes almost nothing changed (bench/README.md). An `Informer` LISTs once, then follows a WATCH from
that list's resourceVersion and keeps each object with its view, built once per change. Its copy
lags the API server by the watch's delay, so:

- the controller's own writes are written through (`observe`) from the API server's response, and
  an event older than what is held never replaces it (resourceVersions compared as integers, as
  client-go's mutation cache does), so a pass always sees what earlier passes wrote;
- a pass uses the copy only while the informer is synced; before the first LIST completes, after a
  410 Gone, or after a broken stream until the relist, the pass LISTs as without a cache;
- a pass that LISTs anyway (the first one after winning the lease) hands its list to `absorb`,
  which takes it only if it is newer than the copy;
- a relist replaces the copy whole (the watch that follows brings whatever came after it), and a
  list whose resourceVersion is older than the copy's (an API server restored from an older etcd
  snapshot) resets the copy to it: the copy never keeps objects the API server no longer has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import urllib3

from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.reachability import Backoff, Reachability

log = logging.getLogger("upgrader")
Obj = dict[str, Any]
V = TypeVar("V")


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def version_of(obj: Obj) -> int | None:
    """An object's resourceVersion as an integer, or None when it is not one (then it always wins)."""
    return _int_or_none((obj.get("metadata") or {}).get("resourceVersion", ""))


def _int_or_none(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Entry(Generic[V]):
    raw: Obj | None  # the object as served, when the informer keeps it (keep_raw)
    view: V
    version: int | None


class Informer(Generic[V]):
    def __init__(
        self,
        api: KubeApi,
        path: str,
        view: Callable[[Obj], V],
        label_selector: str | None = None,
        on_change: Callable[[], None] | None = None,
        timeout_seconds: int = 60,
        keep_raw: bool = True,
        slim: Callable[[Obj], Obj] | None = None,
        page: int | None = None,
        only_viewed: bool = False,
    ) -> None:
        self.api = api
        self.path = path
        self.view = view
        self.label_selector = label_selector
        self.on_change = on_change or (lambda: None)
        self.timeout_seconds = timeout_seconds
        self.keep_raw = keep_raw  # off: only views are held (the raw JSON is most of the memory)
        self.slim = slim  # what of the raw object is held, when not all of it
        # LIST in pages of this many, each page's JSON freed once its views are built (a collection
        # too large to decode whole: every pod of the fleet).
        self.page = page
        # A view of None means the object is not one to hold (of every pod, those holding GPUs);
        # changes to objects not held do not wake the loop.
        self.only_viewed = only_viewed
        self._lock = threading.Lock()
        self._entries: dict[str, Entry[V]] = {}
        self._synced = False
        self._version = ""  # the resourceVersion the watch continues from
        # Between tries after a failure: from a second, doubling to a cap, with jitter; reset once a
        # watch is open again. `wait` is how (tests put a virtual clock here).
        self.backoff = Backoff(1.0)
        self.wait: Callable[[threading.Event, float], bool] = lambda event, seconds: event.wait(seconds)
        self._trouble: str | None = None  # what the log last said went wrong, said once per change
        self._started = False  # `run` began: from then on only its own LIST and WATCH fill the copy
        self._seeding = False  # see seed_from_first_list
        self._given: Mapping[str, V] = {}  # views a pass built of the list it hands over (absorb)
        self._changed: set[str] | None = None  # keys changed since the last `read`; None: all may have
        # A dropped stream (the connection closed, no answer): the copy is kept, unsynced,
        # and the next WATCH resumes from its resourceVersion, as client-go's reflector does; only
        # 410 Gone, a distrusted copy or another error make the next step LIST the collection again.
        self._resume = False

    # ----- what a pass reads ------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def version(self) -> str:
        """The resourceVersion the copy is at (what the next watch continues from)."""
        return self._version

    def entries(self, resuming: bool = False) -> dict[str, Entry[V]] | None:
        """A copy of the held objects, or None while not synced (the pass must LIST). `resuming`:
        also while the watch resumes after a dropped stream (the copy kept, seconds behind)."""
        with self._lock:
            return dict(self._entries) if self._readable(resuming) else None

    def read(self, resuming: bool = False) -> tuple[dict[str, Entry[V]], set[str] | None] | None:
        """`entries()`, and the keys added, changed or deleted since the last `read` (None: the copy
        was replaced whole since, or this is the first read), for work kept from pass to pass."""
        with self._lock:
            if not self._readable(resuming):
                return None
            changed, self._changed = self._changed, set()
            return dict(self._entries), changed

    def _readable(self, resuming: bool) -> bool:
        return self._synced or (resuming and self._resumable)

    @property
    def _resumable(self) -> bool:
        """A dropped stream left the copy, and the version its watch resumes from."""
        return self._resume and bool(self._version)

    # ----- what the controller tells it -------------------------------------------------------------

    def observe(self, obj: Obj) -> None:
        """An object as the API server returned it to one of our writes. Only held objects are
        updated: a pod outside the selector, say, is not ours to add."""
        with self._lock:
            if object_key(obj) in self._entries:
                self._put(obj)

    def absorb(self, listing: Obj, views: Mapping[str, V] | None = None) -> None:
        """A full LIST a pass made, taken only when it is newer than the copy: newer objects replace
        held ones; held objects the list does not have are dropped unless newer than the list. A
        list as new as the copy is ignored whole: an object deleted since it was served would come
        back from it, and no later event would remove it. A list older than the copy means the API
        server went back in time (restored): the copy is reset to it. `views`: the pass's own views
        of the listed objects, by key, taken as they are instead of being built again."""
        with self._lock:
            self._given = views or {}  # only while this list is taken in: the watch's objects are its own
            try:
                self._take_in(listing)
            finally:
                self._given = {}

    def _take_in(self, listing: Obj) -> None:
        listed_at = version_of(listing)
        if self._seeding and not self._started and not self._version and listed_at is not None:
            self._reset(listing, None)  # read before the watch started: it starts from this list
            return
        held_at = _int_or_none(self._version)
        if listed_at is None or listed_at == held_at:
            return
        if held_at is not None and listed_at < held_at:
            self._reset(listing, held_at)
            return
        self._merge(listing)

    def seed_from_first_list(self) -> None:
        """The first list a pass hands over before `run` starts (`upgrader run`'s policy check) is
        the copy `run` starts from: its watch continues from that list's resourceVersion, and the
        collection is not LISTed again to start. Until `run` starts, passes LIST as when unsynced."""
        self._seeding = True

    def distrust(self, why: str) -> None:
        """A fresh read the pass made elsewhere (a node's pods) contradicts the copy: the API server
        went back in time (restored), and its watches may say nothing of it. The copy is not read
        again until a full list replaces it (see `absorb` and `step`)."""
        with self._lock:
            if self._synced or self._resume:
                log.warning("%s: %s (restored from an older state?): listing again", self.path, why)
                self._synced = self._resume = False

    def position(self) -> int | None:
        """The resourceVersion the copy has followed the history to (None: cannot tell)."""
        return _int_or_none(self._version)

    def went_back(self, listed_at: int | None) -> bool:
        """A list answered at a resourceVersion below the copy's."""
        held_at = _int_or_none(self._version)
        return listed_at is not None and held_at is not None and listed_at < held_at

    def _reset(self, listing: Obj, held_at: int | None) -> None:
        """Replace the copy with `listing` (see `_replace`)."""
        entries: dict[str, Entry[V]] = {}
        for item in listing.get("items") or []:
            view = self._view(item)
            if view is not None or not self.only_viewed:
                entries[object_key(item)] = Entry(self._raw(item), view, version_of(item))
        self._replace(entries, str((listing.get("metadata") or {}).get("resourceVersion", "")), held_at)

    def _replace(self, entries: dict[str, Entry[V]], version: str, held_at: int | None) -> None:
        """The copy is `entries` at `version`; said aloud when the API server's resourceVersion went back."""
        listed_at = _int_or_none(version)
        if held_at is not None and listed_at is not None and listed_at < held_at:
            log.warning(
                "%s: the API server's resourceVersion went back from %d to %d (restored from an older "
                "state?): the copy is replaced by what it serves now",
                self.path,
                held_at,
                listed_at,
            )
        self._entries, self._changed, self._version = entries, None, version

    def _merge(self, listing: Obj) -> None:
        items = listing.get("items") or []
        listed_at = version_of(listing)
        seen = {object_key(item) for item in items}
        for item in items:
            self._put(item)
        for key in [k for k in self._entries if k not in seen]:
            held = self._entries[key].version
            if listed_at is None or held is None or held <= listed_at:
                self._drop(key)

    def _put(self, obj: Obj) -> bool:
        """Hold `obj` (or, `only_viewed`, drop it when it has no view); True when the copy changed."""
        key, version = object_key(obj), version_of(obj)
        held = self._entries.get(key)
        if held is not None and held.version is not None and version is not None and version < held.version:
            return False  # an event older than our own write: keep what we wrote
        view = self._view(obj)
        if view is None and self.only_viewed:
            return self._drop(key)
        self._entries[key] = Entry(self._raw(obj), view, version)
        if self._changed is not None:
            self._changed.add(key)
        return True

    def _drop(self, key: str) -> bool:
        if self._entries.pop(key, None) is None:
            return False
        if self._changed is not None:
            self._changed.add(key)
        return True

    def _view(self, obj: Obj) -> V:
        given = self._given.get(object_key(obj)) if self._given else None
        return given if given is not None else self.view(obj)

    def _raw(self, obj: Obj) -> Obj | None:
        if not self.keep_raw:
            return None
        return self.slim(obj) if self.slim is not None else obj

    # ----- the LIST + WATCH loop --------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """`step` until `stop` is set; never raises. After a failure it backs off (`backoff`), and it
        says what went wrong once per change: an API server that is away through `reachability`
        (one line for the loop and every watch), anything else as a warning of its own."""
        self._started = True
        if self._seeding and self._version:
            self._synced = True  # seeded: watch from the seed's resourceVersion, no LIST first
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.step(stop)
                if time.monotonic() - started < 1.0:  # a stream that ends at once (a proxy, a
                    self.wait(stop, 1.0)  # server going down) must not turn into a request loop
                continue
            except ApiError as exc:
                self._lost(exc)
            except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:  # a dropped stream
                log.debug("watch %s lost (%s); resuming from resourceVersion %s", self.path, exc, self._version)
            except Exception as exc:  # an informer thread must never die silently
                self._trouble_is(f"watch {self.path} failed ({type(exc).__name__}: {exc}); listing again")
            self.wait(stop, self.backoff.next())

    def step(self, stop: threading.Event | None = None) -> None:
        """LIST if not synced, then follow one WATCH from the last version until the stream ends (its
        timeout; in process, once it has delivered what is queued). A 410 Gone or a failure raises
        and leaves the informer unsynced, so the next step lists again."""
        listing = not self._synced and not self._resumable
        try:
            if listing:
                self._relist()
            events = self.api.watch(self.path, self._version, self.timeout_seconds, self.label_selector)
            self._watching()
            for event in events:
                if stop is not None and stop.is_set():
                    return
                self.apply(event)
        except BaseException as exc:
            with self._lock:
                self._synced = False
                self._resume = not listing and _dropped(exc)  # a LIST that failed is made again
            raise

    def _watching(self) -> None:
        """The watch is open: the API server answers, and the next failure backs off from the start.
        Resumed after a dropped stream, the copy is read again: the watch brings what it missed."""
        with self._lock:
            if self._resume:
                self._synced, self._resume = True, False
        self.backoff.reset()
        self._trouble = None
        reachability: Reachability | None = getattr(self.api, "reachability", None)  # test doubles lack it
        if reachability is not None:
            reachability.answered(self._reporter)

    @property
    def _reporter(self) -> str:
        return f"watch {self.path}"

    def _relist(self) -> None:
        if self.page:
            entries, version = self._list_pages(self.page)
            with self._lock:
                self._replace(entries, version, _int_or_none(self._version))
                self._synced = True
            self.on_change()
            return
        listing = self.api.list(self.path, label_selector=self.label_selector)
        with self._lock:
            self._reset(listing, _int_or_none(self._version))  # replaced, not merged
            self._synced = True
        self.on_change()

    def _list_pages(self, size: int) -> tuple[dict[str, Entry[V]], str]:
        """The collection, LISTed `size` objects at a time; the copy is at the first page's
        resourceVersion (a real API server serves every page from it; the watch brings the rest)."""
        entries: dict[str, Entry[V]] = {}
        version, token = "", None
        while True:
            listing = self.api.list(self.path, self.label_selector, limit=size, continue_token=token)
            meta = listing.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            for item in listing.get("items") or []:
                view = self.view(item)
                if view is not None or not self.only_viewed:
                    entries[object_key(item)] = Entry(self._raw(item), view, version_of(item))
            token = meta.get("continue")
            if not token:
                return entries, version

    def apply(self, event: Obj) -> None:
        """One watch event: ADDED/MODIFIED/DELETED change the copy, BOOKMARK moves the version on,
        ERROR (410 Gone: history compacted) ends the copy until a relist."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiError(int(obj.get("code") or 0), str(obj.get("reason") or ""), str(obj.get("message") or ""))
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        with self._lock:
            changed = False
            if kind in ("ADDED", "MODIFIED"):
                changed = self._put(obj)
            elif kind == "DELETED":
                changed = self._drop(object_key(obj))
            if version:
                self._version = version
        if kind != "BOOKMARK" and (changed or not self.only_viewed):
            self.on_change()

    def _lost(self, exc: ApiError) -> None:
        reachability: Reachability | None = getattr(self.api, "reachability", None)
        if reachability is not None and exc.away:
            reachability.failed(self._reporter, exc)
        elif reachability is not None:  # any other answer still says the API server is there
            reachability.answered(self._reporter)
        if exc.status == 410 or (exc.away and reachability is not None):  # routine, or said above
            log.debug("watch %s lost (%s); listing again", self.path, exc)
        else:
            self._trouble_is(f"watch {self.path} lost ({exc}); listing again")

    def _trouble_is(self, line: str) -> None:
        (log.debug if line == self._trouble else log.warning)("%s", line)
        self._trouble = line


def _dropped(exc: BaseException) -> bool:
    """The stream broke, or no answer came: the copy stands, the watch resumes from it. An answer
    (410 Gone, 504 Too large resource version after a restore, 403, ...) makes the informer list."""
    if isinstance(exc, ApiError):
        return exc.status == 0
    return isinstance(exc, OSError | ValueError | urllib3.exceptions.HTTPError)


def start(informers: Iterable[Informer[Any]], stop: threading.Event) -> list[threading.Thread]:
    threads = []
    for informer in informers:
        thread = threading.Thread(target=informer.run, args=(stop,), daemon=True, name=f"informer {informer.path}")
        thread.start()
        threads.append(thread)
    return threads
