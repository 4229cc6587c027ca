"""The files of the shards that the driver sends to workers which cannot reach the inputs, read
ahead on a thread of their own, so that the driver's scheduling loop never waits on storage, and
held within a budget of bytes, so that its memory stays bounded whatever the size of the set."""

from __future__ import annotations

import threading
from typing import Callable, Hashable


class ReadAhead:
    """The files of each key followed (a shard: files_of(key) names its files), read in the order
    followed on one thread with read(location). The next key is read only while less than `budget`
    bytes are held (read and not yet taken), so at most `budget` plus one key's files are held; a
    key no longer followed is dropped. Nothing waits on the reading but wait() and `idle`."""

    def __init__(self, files_of: Callable[[Hashable], list[str]], read: Callable[[str], bytes], budget: int):
        self._files_of, self._read, self._budget = files_of, read, budget
        self._order: list = []  # the keys to read, first first
        self._held: dict = {}  # key -> its files' bytes, or the exception reading them raised
        self._sizes: dict = {}  # key -> its bytes held
        self._reading = None  # the key being read (None: none)
        self._closed = False
        self._lock = threading.Condition()
        # Set while the reader has nothing it may read (all read, or the budget held, or closed):
        # cleared, under the lock, by whatever gives it something to read.
        self.idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inr-read-ahead", daemon=True)
        self._thread.start()

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def follow(self, keys) -> None:
        """Read the files of `keys`, in this order; what is held of other keys is dropped."""
        with self._lock:
            self._order = list(keys)
            wanted = set(self._order)
            for key in [key for key in self._held if key not in wanted]:
                del self._held[key], self._sizes[key]
            self._changed()

    def has(self, key) -> bool:
        """Whether the files of `key` are read or being read."""
        with self._lock:
            return key in self._held or key == self._reading

    def ready(self, key) -> bool:
        with self._lock:
            return key in self._held

    def wait(self, seconds: float) -> None:
        """Until a key's files are read, or `seconds` pass (short: the caller looks at its signals)."""
        with self._lock:
            if not self._held:
                self._lock.wait(seconds)

    def take(self, key) -> list[bytes] | None:
        """The files of `key` if they are read (no longer held nor followed here), else None; what
        reading them raised is raised here."""
        with self._lock:
            if key not in self._held:
                return None
            contents = self._held.pop(key)
            del self._sizes[key]
            self._order.remove(key)  # not read again unless followed again
            self._changed()
        if isinstance(contents, BaseException):
            raise contents
        return contents

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._held.clear()
            self._sizes.clear()
            self._lock.notify_all()

    def _next(self):
        """The key to read now (None: none may be)."""
        if self._closed or sum(self._sizes.values()) >= self._budget:
            return None
        return next((key for key in self._order if key not in self._held and key != self._reading), None)

    def _changed(self) -> None:
        if self._next() is not None:
            self.idle.clear()
        self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                key = self._next()
                while key is None and not self._closed:
                    self.idle.set()
                    self._lock.wait()
                    key = self._next()
                if self._closed:
                    self.idle.set()
                    return
                self._reading = key
            try:
                contents = [self._read(location) for location in self._files_of(key)]
                size = sum(map(len, contents))
            except Exception as exc:  # said where the key is taken, in the driver's loop
                contents, size = exc, 0
            with self._lock:
                self._reading = None
                if key in self._order and not self._closed:
                    self._held[key], self._sizes[key] = contents, size
                self._changed()
