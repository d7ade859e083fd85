"""Strata, a persistent ordered key-value store, from Python.

The API follows plyvel's (LevelDB's binding)::

    import strata

    with strata.DB("/tmp/my-db") as db:
        db.put(b"apple", b"red")
        assert db.get(b"apple") == b"red"
        with db.write_batch(transaction=True) as wb:   # atomic; discarded on an exception
            wb.put(b"banana", b"yellow")
            wb.delete(b"apple")
        for key, value in db.iterator(prefix=b"ban"):
            print(key, value)

Keys and values are ``bytes`` (or any buffer); a ``str`` raises ``TypeError``. Every call
into the engine releases the GIL. Errors are ``strata.Error`` or one of its subclasses
``CorruptionError``, ``IOError`` and ``ClosedError``.
"""

from ._strata import (
    DB,
    ClosedError,
    CorruptionError,
    Error,
    IOError,
    Iterator,
    Snapshot,
    WriteBatch,
    check,
    destroy_db,
    repair_db,
)

__all__ = [
    "DB",
    "ClosedError",
    "CorruptionError",
    "Error",
    "IOError",
    "Iterator",
    "IteratorInvalidError",
    "RawIterator",
    "PrefixedDB",
    "Snapshot",
    "WriteBatch",
    "check",
    "destroy_db",
    "repair_db",
]


def _prefix_end(prefix):
    """The smallest key after every key that begins with ``prefix`` (None: no such key)."""
    stripped = bytes(prefix).rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _as_bytes(key, what="key"):
    """The bytes of ``key``: ``bytes`` or any buffer; a ``str`` or an int is refused, as the
    native calls refuse them (``bytes(3)`` would make three zero bytes)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        raise TypeError(f"{what} must be bytes (or a buffer such as bytearray or memoryview), not str: encode it first")
    try:
        return memoryview(key).tobytes()
    except TypeError:
        raise TypeError(f"{what} must be bytes (or a buffer such as bytearray or memoryview), not {type(key).__name__}") from None


class IteratorInvalidError(Error):
    """A raw iterator was asked for its entry, or moved, while on no entry."""


class RawIterator:
    """plyvel's raw iterator: a cursor that sits *on* an entry (``valid()``), moved by
    ``seek_to_first()``, ``seek_to_last()``, ``seek(target)`` (the first key at or after
    ``target``), ``next()`` and ``prev()``, read by ``key()``, ``value()`` and ``item()``.
    Made by ``DB.raw_iterator()``; it reads a snapshot taken when it was made."""

    def __init__(self, it):
        # `it` is a native Iterator over every entry, whose cursor sits between entries;
        # this one keeps it just after the entry it is on.
        self._it = it
        self._entry = None

    def _step(self):
        try:
            return next(self._it)
        except StopIteration:
            return None

    def _back(self):
        try:
            return self._it.prev()
        except StopIteration:
            return None

    def valid(self):
        return self._entry is not None

    def seek_to_first(self):
        self._it.seek_to_start()
        self._entry = self._step()

    def seek_to_last(self):
        self._it.seek_to_stop()
        self._entry = self._back()
        if self._entry is not None:
            self._step()

    def seek(self, target):
        self._it.seek(_as_bytes(target, "target"))
        self._entry = self._step()

    def next(self):
        if self._entry is None:
            raise IteratorInvalidError("next() on an iterator that is on no entry")
        self._entry = self._step()

    def prev(self):
        if self._entry is None:
            raise IteratorInvalidError("prev() on an iterator that is on no entry")
        self._back()  # back over the current entry
        self._entry = self._back()
        if self._entry is not None:
            self._step()
        else:
            # Before the first entry: the cursor stays at the start.
            self._it.seek_to_start()

    def item(self):
        if self._entry is None:
            raise IteratorInvalidError("the iterator is on no entry")
        return self._entry

    def key(self):
        return self.item()[0]

    def value(self):
        return self.item()[1]

    def close(self):
        self._entry = None
        self._it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _PrefixedIterator:
    """A native iterator over prefixed keys that gives them without the prefix."""

    def __init__(self, it, prefix, include_key, include_value):
        self._it = it
        self._prefix = prefix
        self._n = len(prefix)
        self._include = (include_key, include_value)

    def _strip(self, entry):
        if self._include == (True, True):
            return entry[0][self._n:], entry[1]
        if self._include[0]:
            return entry[self._n:]
        return entry

    def __iter__(self):
        return self

    def __next__(self):
        return self._strip(next(self._it))

    def prev(self):
        return self._strip(self._it.prev())

    def seek(self, target):
        self._it.seek(self._prefix + _as_bytes(target, "target"))

    def seek_to_start(self):
        self._it.seek_to_start()

    def seek_to_stop(self):
        self._it.seek_to_stop()

    def close(self):
        self._it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _prefixed_bounds(prefix, start, stop, sub_prefix, include_start, include_stop):
    """The bounds on the whole database of an iterator over a prefixed view."""
    if sub_prefix is not None:
        if start is not None or stop is not None:
            raise TypeError("prefix cannot be combined with start or stop")
        return {"prefix": prefix + _as_bytes(sub_prefix, "prefix")}
    if start is None and stop is None:
        return {"prefix": prefix}
    bounds = {}
    if start is None:
        bounds.update(start=prefix, include_start=True)
    else:
        bounds.update(start=prefix + _as_bytes(start, "start"), include_start=include_start)
    if stop is None:
        end = _prefix_end(prefix)
        if end is not None:
            bounds.update(stop=end, include_stop=False)
    else:
        bounds.update(stop=prefix + _as_bytes(stop, "stop"), include_stop=include_stop)
    return bounds


class _PrefixedWriteBatch:
    def __init__(self, batch, prefix):
        self._batch = batch
        self._prefix = prefix

    def put(self, key, value):
        self._batch.put(self._prefix + _as_bytes(key), value)

    def delete(self, key):
        self._batch.delete(self._prefix + _as_bytes(key))

    def delete_range(self, start, stop):
        self._batch.delete_range(self._prefix + _as_bytes(start, "start"), self._prefix + _as_bytes(stop, "stop"))

    def clear(self):
        self._batch.clear()

    def write(self):
        self._batch.write()

    def __len__(self):
        return len(self._batch)

    def __enter__(self):
        self._batch.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._batch.__exit__(exc_type, exc, tb)


class _PrefixedSnapshot:
    def __init__(self, view, snapshot):
        self._view = view
        self._snapshot = snapshot

    def get(self, key, default=None, *, verify_checksums=False, fill_cache=True):
        return self._snapshot.get(self._view.prefix + _as_bytes(key), default,
                                  verify_checksums=verify_checksums, fill_cache=fill_cache)

    def iterator(self, **kwargs):
        return self._view.iterator(snapshot=self._snapshot, **kwargs)

    def close(self):
        self._snapshot.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class PrefixedDB:
    """A view of the keys of ``db`` that begin with ``prefix``, with the prefix stripped
    (plyvel's ``PrefixedDB``); from ``DB.prefixed_db(prefix)``. Reads and writes through it
    add the prefix; iterators give keys without it."""

    def __init__(self, db, prefix):
        self.db = db
        self.prefix = _as_bytes(prefix, "prefix")

    def __repr__(self):
        return f"<strata.PrefixedDB {self.prefix!r} of {self.db!r}>"

    def get(self, key, default=None, *, verify_checksums=False, fill_cache=True):
        return self.db.get(self.prefix + _as_bytes(key), default,
                           verify_checksums=verify_checksums, fill_cache=fill_cache)

    def put(self, key, value, sync=None):
        self.db.put(self.prefix + _as_bytes(key), value, sync)

    def delete(self, key, sync=None):
        self.db.delete(self.prefix + _as_bytes(key), sync)

    def delete_range(self, start, stop, sync=None):
        self.db.delete_range(self.prefix + _as_bytes(start, "start"), self.prefix + _as_bytes(stop, "stop"), sync)

    def get_many(self, keys):
        return self.db.get_many([self.prefix + _as_bytes(k) for k in keys])

    def write_batch(self, *, transaction=False, sync=None):
        return _PrefixedWriteBatch(self.db.write_batch(transaction=transaction, sync=sync), self.prefix)

    def snapshot(self):
        return _PrefixedSnapshot(self, self.db.snapshot())

    def iterator(self, start=None, stop=None, prefix=None, reverse=False, include_start=True,
                 include_stop=False, include_key=True, include_value=True, snapshot=None,
                 fill_cache=True, verify_checksums=False):
        if isinstance(snapshot, _PrefixedSnapshot):
            snapshot = snapshot._snapshot
        bounds = _prefixed_bounds(self.prefix, start, stop, prefix, include_start, include_stop)
        it = self.db.iterator(reverse=reverse, include_key=include_key,
                              include_value=include_value, snapshot=snapshot,
                              fill_cache=fill_cache, **bounds)
        return _PrefixedIterator(it, self.prefix, include_key, include_value)

    def prefixed_db(self, prefix):
        return PrefixedDB(self.db, self.prefix + _as_bytes(prefix, "prefix"))

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        self.delete(key)

    def __contains__(self, key):
        return self.get(key) is not None

    def __iter__(self):
        return self.iterator(include_value=False)


def _prefixed_db(self, prefix):
    """A view of the keys that begin with ``prefix``, with the prefix stripped."""
    return PrefixedDB(self, prefix)


DB.prefixed_db = _prefixed_db
