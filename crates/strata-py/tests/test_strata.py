"""Tests of the Python binding: every method, a model of the whole API against a dict across
reopens, iterators against sorted keys, snapshots, a batch across a process kill, bad input,
and the GIL released during engine calls."""

import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import strata


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "db")


@pytest.fixture
def db(path):
    with strata.DB(path) as db:
        yield db


# --- the basic calls and the mapping protocol -------------------------------------------


def test_put_get_delete(db):
    assert db.get(b"a") is None
    assert db.get(b"a", b"default") == b"default"
    db.put(b"a", b"1")
    assert db.get(b"a") == b"1"
    db.put(b"a", b"2", sync=True)
    assert db.get(b"a") == b"2"
    db.delete(b"a")
    assert db.get(b"a") is None
    db.delete(b"never-written")
    assert db.get(b"", b"none") == b"none"
    db.put(b"", b"empty key")
    assert db.get(b"") == b"empty key"


def test_values_are_binary_and_large(db):
    value = bytes(range(256)) * 4096
    db.put(b"\x00\xff", value)
    assert db.get(b"\x00\xff") == value


def test_mapping_protocol(db):
    db[b"k"] = b"v"
    assert db[b"k"] == b"v"
    assert b"k" in db
    assert b"x" not in db
    with pytest.raises(KeyError):
        db[b"x"]
    del db[b"k"]
    assert b"k" not in db
    for k in [b"c", b"a", b"b"]:
        db[k] = k.upper()
    assert list(db) == [b"a", b"b", b"c"]
    with pytest.raises(TypeError):
        len(db)


def test_buffers_are_accepted_and_str_refused(db):
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    assert db.get(b"ba") == b"mv"
    assert db.get(memoryview(b"ba")) == b"mv"
    for call in [
        lambda: db.put("k", b"v"),
        lambda: db.put(b"k", "v"),
        lambda: db.get("k"),
        lambda: db.delete("k"),
        lambda: db[("k")],
        lambda: db.iterator(start="a"),
        lambda: db.iterator(prefix="a"),
        lambda: db.get_many([b"a", "b"]),
        lambda: db.put(1, b"v"),
        lambda: db.put(None, b"v"),
    ]:
        with pytest.raises(TypeError):
            call()
    # Nothing was written by the refused calls.
    assert list(db.iterator()) == [(b"ba", b"mv")]


def test_get_many(db):
    db.put(b"a", b"1")
    db.put(b"c", b"3")
    assert db.get_many([b"a", b"b", b"c"]) == [b"1", None, b"3"]
    assert db.get_many([]) == []
    assert db.get_many(k for k in [b"c"]) == [b"3"]


def test_delete_range(db):
    for i in range(100):
        db.put(b"%03d" % i, b"v")
    db.delete_range(b"010", b"090")
    assert [k for k in db] == [b"%03d" % i for i in list(range(10)) + list(range(90, 100))]


def test_compact_range_flush_stats_and_sync(db):
    for i in range(2000):
        db.put(b"key%05d" % i, b"x" * 100)
    for i in range(0, 2000, 2):
        db.delete(b"key%05d" % i)
    db.flush()
    db.compact_range()
    db.compact_range(b"key00000", b"key00100")
    db.sync_wal()
    stats = db.stats()
    assert stats["flushes"] >= 1
    assert stats["sst_bytes"] > 0
    assert sum(level["files"] for level in stats["levels"]) >= 1
    assert stats["last_sequence"] == 3000
    assert stats["write_amplification"] > 0
    assert [k for k in db] == [b"key%05d" % i for i in range(1, 2000, 2)]


def test_approximate_sizes_and_properties_as_plyvel(db, path):
    for i in range(4000):
        db.put(b"key%05d" % i, bytes([i % 251]) * 200)
    db.compact_range()
    # About 200 bytes of value and 8 of key for each key in a range, and the zeroes that keep
    # each 4 KiB block within a page (under 5% with entries of this size).
    whole = db.approximate_size(b"key00000", b"key04000")
    assert 0.95 * 4000 * 216 <= whole <= 1.10 * 4000 * 216
    first, empty, reversed_ = db.approximate_sizes(
        (b"key00000", b"key01000"), (b"x", b"y"), (b"key02000", b"key01000")
    )
    assert 0.9 * 1000 * 216 <= first <= 1.1 * 1000 * 216
    assert (empty, reversed_) == (0, 0)
    assert db.approximate_sizes() == []
    assert db.get_property(b"rocksdb.estimate-num-keys") == b"4000"
    files, level = 0, 0
    while (count := db.get_property(b"leveldb.num-files-at-level%d" % level)) is not None:
        files, level = files + int(count), level + 1
    on_disk = sorted(int(p.stem) for p in pathlib.Path(path).glob("*.sst"))
    assert files == len(on_disk)
    listing = db.get_property(b"leveldb.sstables")
    assert sorted(int(line.split(b":")[0]) for line in listing.split(b"\n")
                  if line.startswith(b" ")) == on_disk
    assert db.get_property(b"leveldb.nothing") is None
    with pytest.raises(ValueError):
        db.approximate_sizes((b"a",))
    with pytest.raises(TypeError):
        db.approximate_size(b"a", "not bytes")


def test_options_are_applied(tmp_path):
    for compression in [None, "none", "lz4", "zstd", "snappy"]:
        p = str(tmp_path / f"db-{compression}")
        with strata.DB(p, write_buffer_size=1 << 16, cache_size=1 << 20, bloom_bits=4,
                       block_size=1024, compression=compression) as db:
            for i in range(3000):
                db.put(b"%06d" % i, b"abcd" * 25)
            db.flush()
            stats = db.stats()
            assert stats["flushes"] >= 2  # the small write buffer filled several times
            assert stats["block_cache_capacity"] == 1 << 20
            bits = {lv["filter_bits_per_key"] for lv in stats["levels"] if lv["files"]}
            assert bits == {4.0}
            assert db.get(b"002999") == b"abcd" * 25
        sizes = sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p) if f.endswith(".sst"))
        if compression in ("lz4", "zstd", "snappy"):
            # The repetitive values compress: the tables are much smaller than the data.
            assert sizes < 3000 * 100 // 4, (compression, sizes)
        else:
            assert sizes > 3000 * 100, (compression, sizes)
    with pytest.raises(ValueError):
        strata.DB(str(tmp_path / "bad"), compression="brotli")
    with pytest.raises(ValueError):
        strata.DB(str(tmp_path / "bad"), filter_policy="bloom")
    # Monkey's bits: a tree of one run gets the whole budget.
    with strata.DB(str(tmp_path / "monkey"), bloom_bits=6, filter_policy="monkey") as db:
        for i in range(1000):
            db.put(b"%06d" % i, b"v")
        db.flush()
        stats = db.stats()
        assert {lv["filter_bits_per_key"] for lv in stats["levels"] if lv["files"]} == {6.0}
        assert stats["expected_false_positives"] > 0


def test_checkpoint_opens_as_a_database(db, tmp_path):
    db.put(b"a", b"1")
    target = str(tmp_path / "copy")
    db.checkpoint(target)
    db.put(b"b", b"2")
    with strata.DB(target, create_if_missing=False) as copy:
        assert list(copy.iterator()) == [(b"a", b"1")]


def test_check_reports_every_file_and_damage(path):
    with strata.DB(path) as db:
        for i in range(500):
            db.put(b"%04d" % i, b"v" * 50)
        db.flush()
    checks = strata.check(path)
    assert {c["kind"] for c in checks} >= {"sst", "wal", "manifest"}
    assert all(c["error"] is None for c in checks)
    sst = next(c["path"] for c in checks if c["kind"] == "sst")
    with open(sst, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0x55]))
    damaged = [c for c in strata.check(path) if c["error"] is not None]
    assert [c["path"] for c in damaged] == [sst]
    assert "corruption" in damaged[0]["error"]


# --- write batches ---------------------------------------------------------------------


def test_write_batch_applies_on_exit_and_discards_on_exception(db):
    db.put(b"old", b"x")
    with db.write_batch() as wb:
        wb.put(b"a", b"1")
        wb.put(b"b", b"2")
        wb.delete(b"old")
        assert len(wb) == 3
        assert db.get(b"a") is None  # nothing is visible before the batch is written
    assert list(db.iterator()) == [(b"a", b"1"), (b"b", b"2")]
    # transaction=True: an exception discards the batch.
    with pytest.raises(RuntimeError):
        with db.write_batch(transaction=True, sync=True) as wb:
            wb.put(b"c", b"3")
            wb.delete(b"a")
            raise RuntimeError("abandon the batch")
    assert list(db.iterator()) == [(b"a", b"1"), (b"b", b"2")]
    with pytest.raises(strata.ClosedError):
        wb.put(b"d", b"4")
    # Without it (plyvel's default), what was gathered is written all the same.
    with pytest.raises(RuntimeError):
        with db.write_batch() as wb:
            wb.put(b"c", b"3")
            raise RuntimeError("written anyway")
    assert list(db.iterator()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_write_batch_append_and_approximate_size(db):
    first, second = db.write_batch(), db.write_batch()
    empty = first.approximate_size()
    first.put(b"a", b"1")
    one = first.approximate_size()
    # A put costs at least its key and value.
    assert one >= empty + 2
    second.put(b"b", b"x" * 1000)
    second.delete(b"a")
    assert second.approximate_size() >= empty + 1001
    first.append(second)
    assert len(first) == 3 and len(second) == 2
    assert first.approximate_size() >= one + 1001
    first.write()
    assert list(db.iterator()) == [(b"b", b"x" * 1000)]
    with pytest.raises(TypeError):
        first.append(b"not a batch")


# --- plyvel's names -----------------------------------------------------------------------


def test_plyvel_constructor_names_and_get_arguments(tmp_path):
    path = str(tmp_path / "p")
    with strata.DB(path, create_if_missing=True, lru_cache_size=3 << 20, bloom_filter_bits=7,
                   compression="snappy", block_size=4096, block_restart_interval=16,
                   max_open_files=100, max_file_size=32 << 10, paranoid_checks=True,
                   write_buffer_size=1 << 20) as db:
        for i in range(20000):
            db.put(b"%08d" % i, b"v" * 100)
        db.compact_range()
        stats = db.stats()
        # Each option reached the engine: the cache's size, the filters' bits, the tables
        # cut at max_file_size and compressed (the values are one byte repeated).
        assert stats["block_cache_capacity"] == 3 << 20
        assert {lv["filter_bits_per_key"] for lv in stats["levels"] if lv["files"]} == {7.0}
        tables = [f for f in os.listdir(path) if f.endswith(".sst")]
        sizes = [os.path.getsize(os.path.join(path, f)) for f in tables]
        assert len(tables) >= 2 and max(sizes) < 64 << 10, sizes
        assert sum(sizes) < 20000 * 100 // 4, sizes
        assert db.get(b"00000007", verify_checksums=True, fill_cache=False) == b"v" * 100
        assert db.get(b"missing", b"d", verify_checksums=True) == b"d"
        # plyvel's options are keywords: a positional one is refused, not taken for another.
        with pytest.raises(TypeError):
            db.write_batch(True)
        with pytest.raises(TypeError):
            db.get(b"k", None, False)
    with pytest.raises(ValueError):
        strata.DB(path, compression="brotli")


def test_raw_iterator_walks_like_plyvels(db):
    keys = [b"%03d" % i for i in range(0, 100, 3)]
    for k in keys:
        db.put(k, k + b"!")
    it = db.raw_iterator()
    assert not it.valid()
    with pytest.raises(strata.IteratorInvalidError):
        it.key()
    it.seek_to_first()
    seen = []
    while it.valid():
        seen.append(it.item())
        it.next()
    assert seen == [(k, k + b"!") for k in keys]
    it.seek_to_last()
    back = []
    while it.valid():
        back.append(it.key())
        it.prev()
    assert back == keys[::-1]
    with pytest.raises(strata.IteratorInvalidError):
        it.next()
    # seek: the first key at or after the target, then both ways from there.
    it.seek(b"050")
    assert it.key() == b"051" and it.value() == b"051!"
    it.prev()
    assert it.key() == b"048"
    it.next()
    it.next()
    assert it.key() == b"054"
    it.seek(b"999")
    assert not it.valid()
    it.seek(b"")
    assert it.key() == b"000"
    it.prev()
    assert not it.valid()
    # Writes after it was made are not seen.
    db.put(b"001", b"late")
    it.seek_to_first()
    it.next()
    assert it.key() == b"003"
    with db.raw_iterator() as it2:
        it2.seek(b"001")
        assert it2.item() == (b"001", b"late")
    # A snapshot's raw iterator reads as of the snapshot.
    with db.snapshot() as snap:
        db.delete(b"001")
        it3 = snap.raw_iterator()
        it3.seek_to_first()
        assert it3.item() == (b"000", b"000!")
        it3.next()
        assert it3.item() == (b"001", b"late")
        assert snap.get(b"001", verify_checksums=True, fill_cache=False) == b"late"
    snap2 = db.snapshot()
    snap2.release()
    with pytest.raises(strata.ClosedError):
        snap2.get(b"000")


def test_a_snapshot_iterates_as_it_was(db):
    db.put(b"a", b"1")
    db.put(b"b", b"2")
    with db.snapshot() as snap:
        db.put(b"a", b"changed")
        db.delete(b"b")
        db.put(b"c", b"new")
        assert list(snap) == [(b"a", b"1"), (b"b", b"2")]
    assert list(db.iterator()) == [(b"a", b"changed"), (b"c", b"new")]


def test_repair_db_and_destroy_db(tmp_path):
    path = str(tmp_path / "r")
    model = {}
    with strata.DB(path) as db:
        for i in range(2000):
            k, v = b"k%05d" % i, b"v%d" % i
            db.put(k, v)
            model[k] = v
        db.compact_range()
        for i in range(0, 2000, 7):
            db.delete(b"k%05d" % i)
            del model[b"k%05d" % i]
    for name in os.listdir(path):
        if name.startswith("MANIFEST-"):
            os.remove(os.path.join(path, name))
    with pytest.raises(strata.Error):
        strata.DB(path)
    report = strata.repair_db(path, compression="zstd", bloom_filter_bits=12)
    assert "unreadable or missing" in report
    # The options shaped the tables repair wrote.
    with strata.DB(path) as db:
        bits = {lv["filter_bits_per_key"] for lv in db.stats()["levels"] if lv["files"]}
        assert bits == {12.0}, bits
    with strata.DB(path) as db:
        assert dict(db.iterator()) == model
        with pytest.raises(strata.Error):
            strata.destroy_db(path)  # open: refused
    strata.destroy_db(path)
    assert not os.path.exists(path)
    strata.destroy_db(path)  # gone: no error


def test_write_batch_write_clear_and_reuse(db):
    wb = db.write_batch()
    wb.put(b"a", b"1")
    wb.clear()
    wb.put(b"b", b"2")
    wb.delete_range(b"x", b"z")
    wb.write()
    assert len(wb) == 0
    wb.put(b"c", b"3")
    wb.write()
    assert list(db) == [b"b", b"c"]


# --- snapshots -------------------------------------------------------------------------


def test_snapshot_isolates_gets_and_iterators(db):
    for k in [b"a", b"b", b"c"]:
        db.put(k, b"old")
    with db.snapshot() as snap:
        db.put(b"a", b"new")
        db.delete(b"b")
        db.put(b"d", b"new")
        db.flush()
        db.compact_range()
        assert snap.get(b"a") == b"old"
        assert snap.get(b"b") == b"old"
        assert snap.get(b"d") is None
        assert snap.get(b"d", b"dflt") == b"dflt"
        assert list(snap.iterator()) == [(b"a", b"old"), (b"b", b"old"), (b"c", b"old")]
        assert list(db.iterator(snapshot=snap, reverse=True, include_value=False)) == [b"c", b"b", b"a"]
        assert snap.sequence == 3
    with pytest.raises(strata.ClosedError):
        snap.get(b"a")
    assert list(db.iterator()) == [(b"a", b"new"), (b"c", b"old"), (b"d", b"new")]


def test_snapshot_of_another_database_is_refused(db, tmp_path):
    with strata.DB(str(tmp_path / "other")) as other:
        snap = other.snapshot()
        with pytest.raises(ValueError):
            db.iterator(snapshot=snap)


# --- iterators against sorted keys ------------------------------------------------------


def expected_range(keys, start, stop, prefix, include_start, include_stop, reverse):
    out = []
    for k in keys:
        if prefix is not None and not k.startswith(prefix):
            continue
        if start is not None and (k < start or (k == start and not include_start)):
            continue
        if stop is not None and (k > stop or (k == stop and not include_stop)):
            continue
        out.append(k)
    return out[::-1] if reverse else out


def random_key(rng):
    return bytes(rng.choice(b"ab\x00\xff") for _ in range(rng.randint(0, 4)))


def test_iterators_match_sorted_keys_for_random_bounds(path):
    rng = random.Random(7)
    model = {}
    with strata.DB(path, write_buffer_size=1 << 12) as db:
        for _ in range(400):
            k = random_key(rng)
            model[k] = bytes([rng.randrange(256)]) * rng.randint(0, 8)
            db.put(k, model[k])
            if rng.random() < 0.2:
                victim = random_key(rng)
                model.pop(victim, None)
                db.delete(victim)
        keys = sorted(model)
        for _ in range(600):
            reverse = rng.random() < 0.5
            if rng.random() < 0.3:
                prefix, start, stop = random_key(rng), None, None
            else:
                prefix = None
                start = random_key(rng) if rng.random() < 0.7 else None
                stop = random_key(rng) if rng.random() < 0.7 else None
            inc_start, inc_stop = rng.random() < 0.5, rng.random() < 0.5
            want = expected_range(keys, start, stop, prefix, inc_start, inc_stop, reverse)
            got = list(db.iterator(start=start, stop=stop, prefix=prefix, reverse=reverse,
                                   include_start=inc_start, include_stop=inc_stop))
            assert got == [(k, model[k]) for k in want], (start, stop, prefix, reverse)
        with pytest.raises(TypeError):
            db.iterator(start=b"a", prefix=b"a")
        with pytest.raises(ValueError):
            db.iterator(include_key=False, include_value=False)


def test_iterator_cursor_moves_as_plyvel(path):
    """next/prev/seek/seek_to_start/seek_to_stop against a model cursor over a sorted list,
    as plyvel's: the cursor sits between keys whatever the direction; seek(t) puts it just
    before t; a forward iterator's next() gives the key after it, a reverse iterator's the
    key before it; prev() undoes next(); seek_to_start and seek_to_stop go to the smallest
    and the largest end of the range; a reverse iterator begins at the largest end."""
    rng = random.Random(11)
    with strata.DB(path, write_buffer_size=1 << 12) as db:
        keys = sorted({random_key(rng) + bytes([i % 7]) for i in range(300)})
        for k in keys:
            db.put(k, k[::-1])
        db.flush()
        for _ in range(80):
            reverse = rng.random() < 0.5
            inc_start, inc_stop = rng.random() < 0.5, rng.random() < 0.5
            if rng.random() < 0.3:
                prefix, start, stop = random_key(rng)[:2], None, None
            else:
                prefix = None
                start = random_key(rng) if rng.random() < 0.5 else None
                stop = random_key(rng) if rng.random() < 0.5 else None
            view = expected_range(keys, start, stop, prefix, inc_start, inc_stop, False)
            it = db.iterator(start=start, stop=stop, prefix=prefix, reverse=reverse,
                             include_start=inc_start, include_stop=inc_stop, include_value=False)
            walk_cursor(it, view, reverse, rng, lambda k, target: k < target, random_key)


def walk_cursor(it, view, reverse, rng, below, random_target):
    """Moves `it` at random and checks each answer against a model cursor over `view`, the
    iterator's keys in order; `below(k, t)` says whether key k comes before target t."""
    cursor = len(view) if reverse else 0  # keys of `view` before the cursor

    def forward():
        nonlocal cursor
        if cursor == len(view):
            return None
        cursor += 1
        return view[cursor - 1]

    def backward():
        nonlocal cursor
        if cursor == 0:
            return None
        cursor -= 1
        return view[cursor]

    # Runs of next() long enough that the cursor reads ahead of them, broken by moves that
    # must undo or drop what it read.
    for _ in range(100):
        op = rng.choice(["next"] * 8 + ["prev", "prev", "seek", "start", "stop"])
        if op in ("next", "prev"):
            want = (backward if (op == "next") == reverse else forward)()
            call = (lambda: next(it)) if op == "next" else it.prev
            if want is None:
                with pytest.raises(StopIteration):
                    call()
            else:
                assert call() == want, (op, reverse)
        elif op == "seek":
            target = random_target(rng)
            it.seek(target)
            cursor = sum(1 for k in view if below(k, target))
        elif op == "start":
            it.seek_to_start()
            cursor = 0
        else:
            it.seek_to_stop()
            cursor = len(view)


def test_iterator_cursor_under_a_comparator_moves_as_plyvel(path):
    """The model cursor's walk under a comparator, where the bounds' ends (an excluded
    start, an included stop) are the cursor's to keep, not the engine's."""
    rng = random.Random(12)
    with strata.DB(path, comparator=by_number, comparator_name=b"test.ByNumber",
                   write_buffer_size=1 << 12) as db:
        numbers = sorted(rng.sample(range(2000), 600))
        for n in numbers:
            db.put(b"%d" % n, b"v")
        for _ in range(40):
            reverse = rng.random() < 0.5
            inc_start, inc_stop = rng.random() < 0.5, rng.random() < 0.5
            start = rng.choice(numbers) if rng.random() < 0.6 else None
            stop = rng.choice(numbers) if rng.random() < 0.6 else None
            view = [b"%d" % n for n in numbers
                    if (start is None or n > start or (n == start and inc_start))
                    and (stop is None or n < stop or (n == stop and inc_stop))]
            it = db.iterator(start=None if start is None else b"%d" % start,
                             stop=None if stop is None else b"%d" % stop,
                             reverse=reverse, include_start=inc_start, include_stop=inc_stop,
                             include_value=False)
            walk_cursor(it, view, reverse, rng, lambda k, t: int(k) < int(t),
                        lambda r: b"%d" % r.randrange(-5, 2005))


def test_an_iterator_with_entries_read_ahead_closes_with_its_database(path):
    db = strata.DB(path)
    for i in range(100):
        db.put(b"%03d" % i, b"v")
    it = db.iterator(include_value=False)
    # Runs of 1, 2, 4 and 8 entries: five of the last are read and not yet given.
    assert [next(it) for _ in range(10)] == [b"%03d" % i for i in range(10)]
    db.close()
    with pytest.raises(strata.ClosedError):
        next(it)


def test_reverse_iterators_seek_as_plyvel(db):
    for k in [b"a", b"b", b"c", b"d"]:
        db.put(k, k)
    it = db.iterator(reverse=True, include_value=False)
    it.seek(b"c")
    assert next(it) == b"b"  # the last key before the target
    it.seek(b"bb")
    assert it.prev() == b"c"
    it.seek_to_stop()
    assert next(it) == b"d"
    it.seek_to_start()
    with pytest.raises(StopIteration):
        next(it)
    assert it.prev() == b"a"


def test_iterator_is_lazy_and_sees_its_own_moment(db):
    for i in range(10):
        db.put(b"%02d" % i, b"v")
    it = db.iterator(include_value=False)
    assert next(it) == b"00"
    db.put(b"05x", b"later")  # written after the iterator was made: not seen
    db.delete(b"09")
    assert list(it) == [b"%02d" % i for i in range(1, 10)]
    with db.iterator() as it2:
        next(it2)
    with pytest.raises(strata.ClosedError):
        next(it2)
    with pytest.raises(strata.ClosedError):
        it2.seek(b"00")


def test_prefixed_db(db):
    users = db.prefixed_db(b"user:")
    users.put(b"1", b"alice")
    users[b"2"] = b"bob"
    db.put(b"user;", b"outside")
    db.put(b"user", b"outside")
    assert db.get(b"user:1") == b"alice"
    assert users.get(b"2") == b"bob"
    assert list(users) == [b"1", b"2"]
    assert list(users.iterator(reverse=True)) == [(b"2", b"bob"), (b"1", b"alice")]
    assert list(users.iterator(start=b"2")) == [(b"2", b"bob")]
    assert list(users.iterator(stop=b"2", include_value=False)) == [b"1"]
    assert list(users.iterator(include_key=False)) == [b"alice", b"bob"]
    it = users.iterator(include_value=False)
    it.seek(b"2")
    assert next(it) == b"2"
    assert it.prev() == b"2"
    with users.write_batch() as wb:
        wb.put(b"3", b"carol")
        wb.delete(b"1")
    assert users.get_many([b"1", b"3"]) == [None, b"carol"]
    with users.snapshot() as snap:
        del users[b"3"]
        assert snap.get(b"3") == b"carol"
        assert list(snap.iterator(include_value=False)) == [b"2", b"3"]
    admins = users.prefixed_db(b"admin:")
    admins.put(b"x", b"1")
    assert db.get(b"user:admin:x") == b"1"
    assert b"3" not in users
    for bad in ["k", 3, [1, 2], None]:
        with pytest.raises(TypeError):
            users.put(bad, b"v")
        with pytest.raises(TypeError):
            users.get(bad)
    with pytest.raises(TypeError):
        db.prefixed_db(10)
    assert users.get(bytearray(b"2")) == b"bob"


def test_prefix_of_ff_bytes(db):
    db.put(b"\xff\xff", b"1")
    db.put(b"\xff\xff\x00", b"2")
    db.put(b"\xfe", b"3")
    assert list(db.iterator(prefix=b"\xff\xff", include_value=False)) == [b"\xff\xff", b"\xff\xff\x00"]
    assert list(db.prefixed_db(b"\xff")) == [b"\xff", b"\xff\x00"]


# --- a model of the whole API against a dict, across reopens --------------------------


@pytest.mark.parametrize("seed", range(4))
def test_model_against_dict_across_reopens(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "db")
    model = {}
    db = strata.DB(path, write_buffer_size=1 << 13)
    try:
        for step in range(1500):
            op = rng.random()
            k = b"k%03d" % rng.randrange(200)
            if op < 0.45:
                v = os.urandom(rng.randint(0, 40))
                db.put(k, v)
                model[k] = v
            elif op < 0.6:
                db.delete(k)
                model.pop(k, None)
            elif op < 0.7:
                with db.write_batch() as wb:
                    for _ in range(rng.randint(1, 10)):
                        bk = b"k%03d" % rng.randrange(200)
                        if rng.random() < 0.7:
                            wb.put(bk, bk * 2)
                            model[bk] = bk * 2
                        else:
                            wb.delete(bk)
                            model.pop(bk, None)
            elif op < 0.73:
                lo, hi = sorted(b"k%03d" % rng.randrange(200) for _ in range(2))
                db.delete_range(lo, hi)
                for mk in [mk for mk in model if lo <= mk < hi]:
                    del model[mk]
            elif op < 0.9:
                assert db.get(k) == model.get(k)
            elif op < 0.97:
                assert list(db.iterator()) == sorted(model.items())
            else:
                db.close()
                db = strata.DB(path, write_buffer_size=1 << 13)
                assert list(db.iterator()) == sorted(model.items())
            if step % 500 == 499:
                db.compact_range()
        db.close()
        db = strata.DB(path, create_if_missing=False)
        assert list(db.iterator()) == sorted(model.items())
        assert list(db.iterator(reverse=True)) == sorted(model.items(), reverse=True)
    finally:
        db.close()


# --- a batch across a process kill -----------------------------------------------------

# Batches of 20,000 keys with 100-byte values (2 MB): the engine spends longer writing each
# batch than Python spends filling it, so that most kills land inside a write.
CHILD = r"""
import sys, strata
db = strata.DB(sys.argv[1], write_buffer_size=4 << 20)
pad = b"x" * 90
n = 0
while True:
    n += 1
    with db.write_batch() as wb:
        value = b"%010d" % n + pad
        for i in range(20000):
            wb.put(b"key%05d" % i, value)
    print(n, flush=True)
"""


def test_a_batch_is_atomic_across_a_process_kill(path):
    """A child writes batches of 20,000 keys, each with its batch number, as fast as it can and
    reports each one written; SIGKILL lands at a random moment. Every key must then hold
    the same number (no batch half-applied), at least the last reported one (a write with
    sync=False survives the death of the process)."""
    rng = random.Random(3)
    for round in range(8):
        child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE)
        reported = [0]

        def read_reports():
            for line in child.stdout:
                reported[0] = int(line)

        reader = threading.Thread(target=read_reports)
        reader.start()
        # The kill lands at a moment unrelated to the child's progress: in the middle of
        # filling a batch or of writing one.
        time.sleep(rng.uniform(0.5, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait()
        reader.join()
        assert reported[0] > 0, "the child wrote no batch"
        with strata.DB(path, create_if_missing=False) as db:
            values = {v for _, v in db.iterator()}
            keys = list(db)
        assert keys == [b"key%05d" % i for i in range(20000)]
        assert len(values) == 1, f"round {round}: a batch was half-applied: {sorted(values)[:3]}"
        assert int(values.pop()[:10]) >= reported[0]


# --- bad input and closed handles ------------------------------------------------------


def test_closed_database_refuses_every_call(path):
    db = strata.DB(path)
    db.put(b"a", b"1")
    snap = db.snapshot()
    it = db.iterator()
    wb = db.write_batch()
    wb.put(b"b", b"2")
    db.close()
    db.close()  # closing twice does nothing
    assert db.closed
    for call in [
        lambda: db.get(b"a"),
        lambda: db.put(b"a", b"1"),
        lambda: db.delete(b"a"),
        lambda: db[b"a"],
        lambda: b"a" in db,
        lambda: db.get_many([b"a"]),
        lambda: db.iterator(),
        lambda: list(db),
        lambda: db.snapshot(),
        lambda: db.flush(),
        lambda: db.compact_range(),
        lambda: db.stats(),
        lambda: next(it),
        lambda: it.seek(b"a"),
        lambda: snap.get(b"a"),
        lambda: wb.write(),
    ]:
        with pytest.raises(strata.ClosedError):
            call()
    with strata.DB(path) as again:
        assert list(again.iterator()) == [(b"a", b"1")]  # the unwritten batch is not there


def test_open_errors(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(strata.Error):
        strata.DB(missing, create_if_missing=False)
    assert not os.path.exists(missing)
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a database")
    with pytest.raises(strata.IOError):
        strata.DB(str(a_file))
    assert a_file.read_bytes() == b"not a database"
    path = str(tmp_path / "db")
    with strata.DB(path) as db:
        db.put(b"k", b"v")
        with pytest.raises(strata.IOError, match="locked"):
            strata.DB(path)
        assert db.get(b"k") == b"v"  # the refused open took nothing from the first
    with pytest.raises(strata.Error, match="exists"):
        strata.DB(path, error_if_exists=True)
    with strata.DB(path) as db:
        assert db.get(b"k") == b"v"
    assert issubclass(strata.CorruptionError, strata.Error)
    assert issubclass(strata.IOError, strata.Error)
    assert issubclass(strata.ClosedError, strata.Error)


def test_damaged_table_raises_corruption_error(path):
    with strata.DB(path) as db:
        for i in range(200):
            db.put(b"%04d" % i, b"v" * 50)
        db.flush()
    sst = [f for f in os.listdir(path) if f.endswith(".sst")][0]
    with open(os.path.join(path, sst), "r+b") as f:
        f.seek(10)
        f.write(b"\xde\xad\xbe\xef")
    with strata.DB(path) as db:
        with pytest.raises(strata.CorruptionError):
            list(db.iterator())


# --- threads and the GIL ---------------------------------------------------------------


def test_engine_calls_release_the_gil(path):
    """While one thread is inside a long engine call, a pure-Python thread must keep running.
    With the GIL held through the call, the counter would move only in the switch interval
    (5 ms) the call might begin with, a few percent of a call this long."""
    with strata.DB(path) as db:
        for i in range(50000):
            db.put(b"%08d" % i, b"v" * 100)
        keys = [b"%08d" % random.randrange(50000) for _ in range(400000)]
        done = threading.Event()
        counter = [0]

        def count():
            while not done.is_set():
                counter[0] += 1

        t = threading.Thread(target=count)
        t.start()
        try:
            # The counter's rate when it has the GIL to itself (sleep releases it).
            c0, t0 = counter[0], time.perf_counter()
            time.sleep(0.1)
            rate = (counter[0] - c0) / (time.perf_counter() - t0)
            c0, t0 = counter[0], time.perf_counter()
            values = db.get_many(keys)
            elapsed, counted = time.perf_counter() - t0, counter[0] - c0
        finally:
            done.set()
            t.join()
        assert values == [b"v" * 100] * len(keys)
        assert elapsed > 0.05, "the call was too short to tell"
        assert counted > 0.15 * rate * elapsed, (counted, rate, elapsed)


def test_a_call_into_the_engine_lets_other_threads_run(path):
    """A call that reads many keys spends nearly all its time in the engine, with the GIL
    released: another Python thread runs all through it. The other thread notes the time
    now and then; with the GIL held for the call, no note could fall inside it (the
    interpreter hands the GIL over only between bytecodes of the calling thread)."""
    with strata.DB(path) as db:
        for i in range(100000):
            db.put(b"%08d" % i, b"v" * 100)
        db.flush()
        keys = [b"%08d" % random.randrange(100000) for _ in range(200000)]
        notes = []
        running = True

        def note():
            n = 0
            while running:
                n += 1
                if n % 100 == 0:
                    notes.append(time.perf_counter())

        spinner = threading.Thread(target=note)
        spinner.start()
        try:
            calls = []
            for _ in range(3):
                start = time.perf_counter()
                db.get_many(keys)
                calls.append((start, time.perf_counter()))
        finally:
            running = False
            spinner.join()
        # Notes inside the middle of a call: well clear of its start and end.
        inside = [sum(1 for t in notes if a + (b - a) / 4 < t < b - (b - a) / 4)
                  for a, b in calls]
        assert min(inside) > 0, f"notes inside the calls: {inside}, calls {calls}"


def test_threads_read_and_write_concurrently(path):
    with strata.DB(path, write_buffer_size=1 << 16) as db:
        errors = []

        def writer(t):
            try:
                for i in range(3000):
                    db.put(b"t%d-%05d" % (t, i), b"%d" % i)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def reader():
            try:
                for _ in range(20):
                    keys = list(db.iterator(include_value=False))
                    assert keys == sorted(keys)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for t in range(3):
            keys = list(db.iterator(prefix=b"t%d-" % t, include_value=False))
            assert keys == [b"t%d-%05d" % (t, i) for i in range(3000)]


def test_close_waits_for_calls_in_other_threads(path):
    db = strata.DB(path)
    for i in range(20000):
        db.put(b"%06d" % i, b"v%d" % i)
    keys = [b"%06d" % i for i in range(20000)]
    want = [b"v%d" % i for i in range(20000)]
    results = []

    def read_all():
        try:
            while True:
                # Each call before the close answers every value, whole.
                results.append(db.get_many(keys) == want)
        except strata.ClosedError:
            results.append("closed")

    threads = [threading.Thread(target=read_all) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    db.close()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert results.count("closed") == 3
    assert all(r is True for r in results if r != "closed")


def test_help_is_useful():
    assert "plyvel" in strata.__doc__
    assert "sync" in strata.DB.__doc__
    assert "len(db)" in strata.DB.__doc__
    assert strata.DB.iterator.__doc__
    assert strata.DB.write_batch.__doc__


# --- comparators: Python callables ordering the keys, as plyvel takes them ---------------


def by_number(a, b):
    """Keys that are decimal numbers, in numeric order (not the order of their bytes)."""
    x, y = int(a), int(b)
    return (x > y) - (x < y)


def test_a_python_comparator_orders_every_read(path):
    numbers = [int(x) for x in random.Random(7).sample(range(100000), 3000)]
    with strata.DB(path, comparator=by_number, comparator_name=b"test.ByNumber",
                   write_buffer_size=64 << 10, block_size=512) as db:
        for n in numbers:
            db.put(b"%d" % n, b"v%d" % n)
        db.compact_range()
        for n in numbers[:300]:
            db.put(b"%d" % n, b"w%d" % n)
        want = sorted(numbers)
        assert [int(k) for k in db.iterator(include_value=False)] == want
        assert [int(k) for k in db.iterator(reverse=True, include_value=False)] == want[::-1]
        assert db.get(b"%d" % numbers[0]) == b"w%d" % numbers[0]
        assert db.get(b"%d" % numbers[-1]) == b"v%d" % numbers[-1]
        # Bounds in numeric order: 9 < 10 < 99 < 100, which bytes would order 10 < 100 < 9.
        lo, hi = want[100], want[200]
        for include_start in (True, False):
            for include_stop in (True, False):
                for reverse in (False, True):
                    got = [int(k) for k in db.iterator(
                        start=b"%d" % lo, stop=b"%d" % hi, include_start=include_start,
                        include_stop=include_stop, reverse=reverse, include_value=False)]
                    expect = [n for n in want
                              if (lo < n or include_start and n == lo)
                              and (n < hi or include_stop and n == hi)]
                    assert got == (expect[::-1] if reverse else expect), (
                        include_start, include_stop, reverse)
        it = db.iterator(start=b"%d" % lo, include_start=False)
        it.seek(b"%d" % lo)
        assert int(next(it)[0]) == want[101]
        it.seek_to_stop()
        assert int(it.prev()[0]) == want[-1]
    # The name is recorded: another comparator, or none, is refused.
    with pytest.raises(strata.Error, match="test.ByNumber"):
        strata.DB(path)
    with pytest.raises(strata.Error, match="test.ByNumber"):
        strata.DB(path, comparator=by_number, comparator_name=b"test.Other")
    with strata.DB(path, comparator=by_number, comparator_name="test.ByNumber") as db:
        assert len(list(db.iterator())) == len(numbers)


def test_comparator_arguments_are_checked_as_plyvels(path):
    with pytest.raises(ValueError):
        strata.DB(path, comparator=by_number)
    with pytest.raises(ValueError):
        strata.DB(path, comparator_name=b"test.ByNumber")
    with pytest.raises(TypeError):
        strata.DB(path, comparator=42, comparator_name=b"test.ByNumber")
    with pytest.raises(TypeError):
        strata.DB(path, comparator=by_number, comparator_name=7)


def test_repair_db_rebuilds_under_the_comparator(path):
    with strata.DB(path, comparator=by_number, comparator_name=b"test.ByNumber") as db:
        for n in range(0, 2000, 7):
            db.put(b"%d" % n, b"v")
        db.compact_range()
    for name in os.listdir(path):
        if name == "CURRENT" or name.startswith("MANIFEST-"):
            os.remove(os.path.join(path, name))
    strata.repair_db(path, comparator=by_number, comparator_name=b"test.ByNumber")
    with strata.DB(path, comparator=by_number, comparator_name=b"test.ByNumber") as db:
        assert [int(k) for k in db.iterator(include_value=False)] == list(range(0, 2000, 7))


def test_a_comparator_that_raises_stops_the_process(path):
    """plyvel's rule: keys cannot be ordered without the comparator, so nothing goes on."""
    script = f"""
import strata
def bad(a, b):
    raise RuntimeError("no order today")
db = strata.DB({path!r}, comparator=bad, comparator_name=b"test.Bad")
db.put(b"a", b"1")
db.put(b"b", b"2")
print(list(db.iterator()))
print("not reached")
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == -signal.SIGABRT, (run.returncode, run.stderr)
    assert "no order today" in run.stderr and "test.Bad" in run.stderr, run.stderr
    assert "not reached" not in run.stdout


def test_a_database_with_a_comparator_closes_when_collected(path):
    """A DB dropped without close() while its engine compacts, calling the comparator from
    its own threads, closes without waiting on the GIL its collector holds: the child ends,
    and reopens the database at once."""
    script = f"""
import gc, strata
def by_number(a, b):
    x, y = int(a), int(b)
    return (x > y) - (x < y)
def fill():
    db = strata.DB({path!r}, comparator=by_number, comparator_name=b"test.ByNumber",
                   write_buffer_size=32 << 10)
    for n in range(20000):
        db.put(b"%d" % n, b"v" * 50)
fill()
gc.collect()
db = strata.DB({path!r}, comparator=by_number, comparator_name=b"test.ByNumber")
print(sum(1 for _ in db.iterator()))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["20000"], run.stdout


def test_seeks_and_prefixes_under_a_comparator(path):
    with strata.DB(path, comparator=by_number, comparator_name=b"test.ByNumber") as db:
        for n in range(0, 200, 10):
            db.put(b"%d" % n, b"v")
        it = db.iterator(start=b"50", include_start=False, include_value=False)
        it.seek(b"20")  # before the excluded start: the iterator's first key comes next
        assert next(it) == b"60"
        it = db.iterator(reverse=True, stop=b"150", include_stop=True, include_value=False)
        it.seek(b"95")  # a reverse iterator gives the last key before the target
        assert [next(it), next(it)] == [b"90", b"80"]
        # Past the included stop, going back: the stop itself, then the keys below it.
        it = db.iterator(stop=b"150", include_stop=True, include_value=False)
        it.seek_to_stop()
        assert [it.prev(), it.prev()] == [b"150", b"140"]
        # A prefix is plyvel's range [prefix, prefix with its last byte raised) in the
        # comparator's order: numbers from 10 to below 11 here, so not 100, which begins
        # with "10".
        assert list(db.iterator(prefix=b"10", include_value=False)) == [b"10"]
