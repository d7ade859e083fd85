//! The native half of the Python package `strata`: the classes `DB`, `WriteBatch`,
//! `Snapshot` and `Iterator`, the exceptions, and `check`. `python/strata/__init__.py`
//! re-exports them and adds what is plain Python (`PrefixedDB`).
//!
//! Every call into the engine runs with the GIL released (`Python::detach`), so that Python
//! threads reading and writing one database run in parallel. Keys and values cross as
//! `bytes` (borrowed, not copied, on the way in) or any object with the buffer protocol
//! (copied, since another thread may change it while the GIL is released); a `str` is
//! refused, as plyvel refuses it.
//!
//! Locking: a `DB` holds its engine handle in a read-write lock, taken for reading by every
//! call and for writing by `close`. Both are taken with the GIL released: a thread that
//! waited for the lock while holding the GIL could block the thread that holds the lock and
//! needs the GIL to return.

mod comparator;
mod cursor;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};
use strata::{Compression, Db, Options, ReadOptions, WriteOptions};

use cursor::{Bounds, Closed, Cursor, Entry};

create_exception!(
    strata,
    Error,
    PyException,
    "The base of every error the engine reports."
);
create_exception!(
    strata,
    CorruptionError,
    Error,
    "Bytes read from a file are not what Strata wrote there (or are in an unknown format)."
);
create_exception!(
    strata,
    IOError,
    Error,
    "The operating system refused a call, or another handle holds the database's lock."
);
create_exception!(
    strata,
    ClosedError,
    Error,
    "The database, snapshot or batch was already closed."
);

/// The Python exception for an engine error, with the engine's message.
fn raise(e: strata::Error) -> PyErr {
    let message = e.to_string();
    match e {
        strata::Error::Io { .. } | strata::Error::Locked(_) => IOError::new_err(message),
        strata::Error::Corruption { .. } | strata::Error::UnsupportedFormat { .. } => {
            CorruptionError::new_err(message)
        }
        strata::Error::Closed => closed("database"),
        _ => Error::new_err(message),
    }
}

fn closed(what: &str) -> PyErr {
    ClosedError::new_err(format!("the {what} is closed"))
}

/// Why a call made with the GIL released failed.
enum Failure {
    Engine(strata::Error),
    Closed,
    ClosedIterator,
}

impl From<strata::Error> for Failure {
    fn from(e: strata::Error) -> Failure {
        Failure::Engine(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Engine(e) => raise(e),
            Failure::Closed => closed("database"),
            Failure::ClosedIterator => closed("iterator"),
        }
    }
}

/// The bytes of a key or value: `bytes` borrowed, other buffers copied, `str` refused.
fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes (or a buffer such as bytearray or memoryview), not str: \
             encode it first"
        )));
    }
    match PyBuffer::<u8>::get(obj) {
        Ok(buf) => Ok(Cow::Owned(buf.to_vec(obj.py())?)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be bytes (or a buffer such as bytearray or memoryview), not {}",
            obj.get_type().name()?
        ))),
    }
}

fn optional_bytes(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    obj.filter(|o| !o.is_none())
        .map(|o| bytes_of(o, what).map(Cow::into_owned))
        .transpose()
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn filter_policy(name: &str, bits: usize) -> PyResult<strata::FilterPolicy> {
    match name {
        "uniform" => Ok(strata::FilterPolicy::Uniform { bits_per_key: bits }),
        "monkey" => Ok(strata::FilterPolicy::Monkey {
            total_bits_per_key: bits,
        }),
        other => Err(PyValueError::new_err(format!(
            "filter_policy must be \"uniform\" or \"monkey\", not {other:?}"
        ))),
    }
}

fn compression(name: Option<&str>) -> PyResult<Compression> {
    match name {
        None | Some("none") => Ok(Compression::None),
        // plyvel's default codec; lz4 is its kind (fast, light), which Strata offers.
        Some("lz4") | Some("snappy") => Ok(Compression::Lz4),
        Some("zstd") => Ok(Compression::Zstd),
        Some(other) => Err(PyValueError::new_err(format!(
            "compression must be None, \"snappy\", \"lz4\" or \"zstd\", not {other:?}"
        ))),
    }
}

/// The engine's options from the constructor's arguments, under Strata's names or plyvel's.
fn open_options(a: &OpenArgs<'_>) -> PyResult<Options> {
    let defaults = Options::default();
    let comparator = comparator::from_args(a.comparator, a.comparator_name)?;
    let bits = a.bloom_bits.or(a.bloom_filter_bits);
    Ok(Options {
        create_if_missing: a.create_if_missing,
        error_if_exists: a.error_if_exists,
        write_buffer_size: a.write_buffer_size.unwrap_or(defaults.write_buffer_size),
        block_cache_bytes: a
            .cache_size
            .or(a.lru_cache_size)
            .unwrap_or(defaults.block_cache_bytes),
        filter_policy: self::filter_policy(
            a.filter_policy,
            bits.unwrap_or(defaults.filter_policy.bits_per_key()),
        )?,
        compression: self::compression(a.compression)?,
        block_size: a.block_size.unwrap_or(defaults.block_size),
        block_restart_interval: a
            .block_restart_interval
            .unwrap_or(defaults.block_restart_interval),
        max_open_files: a.max_open_files.unwrap_or(defaults.max_open_files),
        target_file_size: a.max_file_size.unwrap_or(defaults.target_file_size),
        comparator: comparator.unwrap_or_else(|| defaults.comparator.clone()),
        ..defaults
    })
}

/// The constructor's arguments that choose engine options.
struct OpenArgs<'a> {
    create_if_missing: bool,
    error_if_exists: bool,
    write_buffer_size: Option<usize>,
    cache_size: Option<usize>,
    lru_cache_size: Option<usize>,
    bloom_bits: Option<usize>,
    bloom_filter_bits: Option<usize>,
    compression: Option<&'a str>,
    block_size: Option<usize>,
    block_restart_interval: Option<usize>,
    max_open_files: Option<usize>,
    max_file_size: Option<u64>,
    filter_policy: &'a str,
    comparator: Option<&'a Bound<'a, PyAny>>,
    comparator_name: Option<&'a Bound<'a, PyAny>>,
}

/// An open Strata database.
///
/// ``DB(path, create_if_missing=True, error_if_exists=False, write_buffer_size=None,
/// cache_size=None, bloom_bits=None, compression=None, block_size=None, sync=False,
/// filter_policy="uniform")``
///
/// ``bloom_bits`` (10 by default) is the Bloom filter bits per key: in every table with
/// ``filter_policy="uniform"``, spread over the levels as Monkey spreads them (fewer in the
/// larger, deeper levels) with ``"monkey"``.
/// Keys and values are ``bytes`` (or any buffer); a ``str`` raises ``TypeError``. ``sync``
/// is the default of every write: ``True`` makes each write durable against power loss
/// before it returns; ``False`` (the default) keeps it safe from a crash of the process
/// only. Use it as a context manager, or call ``close()``.
///
/// The mapping protocol works: ``db[k]``, ``db[k] = v``, ``del db[k]`` (which, as
/// ``delete``, does not raise ``KeyError`` for a missing key: knowing would cost a read),
/// ``k in db`` and ``for k in db`` (keys in order). ``len(db)`` is not offered: a
/// log-structured tree does not know its number of keys without reading them all.
#[pyclass(module = "strata", name = "DB", frozen)]
struct PyDb {
    db: RwLock<Option<Db>>,
    path: String,
    sync: bool,
    /// The order of the keys, which iterators' bounds follow.
    comparator: Arc<dyn strata::Comparator>,
}

impl Drop for PyDb {
    /// A database collected without `close()` closes here, with the GIL let go: closing waits
    /// for the engine's threads, which may be inside a Python comparator waiting for it.
    fn drop(&mut self) {
        let db = self
            .db
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(db) = db {
            // Past the interpreter's shutdown there is no GIL to let go of: the database is
            // dropped as the closure is.
            let _ = Python::try_attach(|py| py.detach(|| drop(db)));
        }
    }
}

impl PyDb {
    /// Runs `f` on the open engine with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Db) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        Ok(py.detach(|| match &*read(&self.db) {
            Some(db) => f(db),
            None => Err(Failure::Closed),
        })?)
    }

    fn write_options(&self, sync: Option<bool>) -> WriteOptions {
        WriteOptions {
            sync: sync.unwrap_or(self.sync),
        }
    }

    /// Writes a batch of one change, which `fill` adds.
    fn write_one(
        &self,
        py: Python<'_>,
        sync: Option<bool>,
        fill: impl FnOnce(&mut strata::WriteBatch) + Send,
    ) -> PyResult<()> {
        let options = self.write_options(sync);
        self.with(py, |db| {
            let mut batch = strata::WriteBatch::new();
            fill(&mut batch);
            Ok(db.write(batch, options)?)
        })
    }

    fn get_with(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        options: &ReadOptions,
    ) -> PyResult<Option<Py<PyBytes>>> {
        let key = bytes_of(key, "key")?;
        let value = self.with(py, |db| Ok(db.get_with(&key, options)?))?;
        Ok(value.map(|v| PyBytes::new(py, &v).unbind()))
    }
}

#[pymethods]
impl PyDb {
    #[new]
    #[pyo3(signature = (
        path,
        create_if_missing = true,
        error_if_exists = false,
        write_buffer_size = None,
        cache_size = None,
        bloom_bits = None,
        compression = None,
        block_size = None,
        sync = false,
        filter_policy = "uniform",
        *,
        lru_cache_size = None,
        bloom_filter_bits = None,
        block_restart_interval = None,
        max_open_files = None,
        max_file_size = None,
        paranoid_checks = None,
        comparator = None,
        comparator_name = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        create_if_missing: bool,
        error_if_exists: bool,
        write_buffer_size: Option<usize>,
        cache_size: Option<usize>,
        bloom_bits: Option<usize>,
        compression: Option<&str>,
        block_size: Option<usize>,
        sync: bool,
        filter_policy: &str,
        lru_cache_size: Option<usize>,
        bloom_filter_bits: Option<usize>,
        block_restart_interval: Option<usize>,
        max_open_files: Option<usize>,
        max_file_size: Option<u64>,
        paranoid_checks: Option<bool>,
        comparator: Option<&Bound<'_, PyAny>>,
        comparator_name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // Strata checks every checksum it reads, always: plyvel's paranoid mode is its only.
        let _ = paranoid_checks;
        let options = open_options(&OpenArgs {
            create_if_missing,
            error_if_exists,
            write_buffer_size,
            cache_size,
            lru_cache_size,
            bloom_bits,
            bloom_filter_bits,
            compression,
            block_size,
            block_restart_interval,
            max_open_files,
            max_file_size,
            filter_policy,
            comparator,
            comparator_name,
        })?;
        let comparator = options.comparator.clone();
        let db = py.detach(|| Db::open(&path, options)).map_err(raise)?;
        Ok(PyDb {
            db: RwLock::new(Some(db)),
            path: path.display().to_string(),
            sync,
            comparator,
        })
    }

    /// The directory the database lives in.
    #[getter]
    fn name(&self) -> &str {
        &self.path
    }

    /// True once ``close()`` ran.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| read(&self.db).is_none())
    }

    /// Closes the database: flushes nothing that is not already in the log, stops the
    /// background threads and releases the lock. Closing twice does nothing; any later call
    /// raises ``ClosedError``.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let db = py.detach(|| {
            self.db
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        match db {
            Some(db) => py.detach(|| db.close()).map_err(raise),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.closed(py) { "closed" } else { "open" };
        format!("<strata.DB {:?} ({state})>", self.path)
    }

    /// The value of ``key``, or ``default`` when it is absent.
    #[pyo3(signature = (key, default = None, *, verify_checksums = false, fill_cache = true))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        verify_checksums: bool,
        fill_cache: bool,
    ) -> PyResult<Py<PyAny>> {
        // Every block read is checked, asked or not.
        let _ = verify_checksums;
        let options = ReadOptions {
            skip_cache: !fill_cache,
            ..ReadOptions::default()
        };
        Ok(match self.get_with(py, key, &options)? {
            Some(v) => v.into_any(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// Sets ``key`` to ``value``. ``sync`` overrides the database's default.
    #[pyo3(signature = (key, value, sync = None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: Option<bool>,
    ) -> PyResult<()> {
        let (key, value) = (bytes_of(key, "key")?, bytes_of(value, "value")?);
        self.write_one(py, sync, |batch| batch.put(&key, &value))
    }

    /// Removes ``key``; removing a missing key is not an error.
    #[pyo3(signature = (key, sync = None))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: Option<bool>) -> PyResult<()> {
        let key = bytes_of(key, "key")?;
        self.write_one(py, sync, |batch| batch.delete(&key))
    }

    /// Removes every key in ``[start, stop)`` with one write, however many there are.
    #[pyo3(signature = (start, stop, sync = None))]
    fn delete_range(
        &self,
        py: Python<'_>,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
        sync: Option<bool>,
    ) -> PyResult<()> {
        let (start, stop) = (bytes_of(start, "start")?, bytes_of(stop, "stop")?);
        self.write_one(py, sync, |batch| batch.delete_range(&start, &stop))
    }

    /// The values of ``keys`` (a list, ``None`` for each absent key), all read at one moment.
    /// Faster than as many ``get`` calls: the lookups' disk reads overlap.
    fn get_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Py<PyList>> {
        let objects: Vec<Bound<'_, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
        let keys = objects
            .iter()
            .map(|k| bytes_of(k, "key"))
            .collect::<PyResult<Vec<_>>>()?;
        let values = self.with(py, |db| {
            let mut values = Vec::with_capacity(keys.len());
            let mut first_error = None;
            let keys = keys.iter().map(|k| &k[..]);
            db.get_many_with(keys, &ReadOptions::default(), |v| match v {
                Ok(v) => values.push(v),
                Err(e) => {
                    values.push(None);
                    first_error.get_or_insert(e);
                }
            });
            match first_error {
                Some(e) => Err(Failure::Engine(e)),
                None => Ok(values),
            }
        })?;
        let list = PyList::empty(py);
        for v in values {
            match v {
                Some(v) => list.append(PyBytes::new(py, &v))?,
                None => list.append(py.None())?,
            }
        }
        Ok(list.unbind())
    }

    /// A batch of writes applied atomically: ``with db.write_batch() as wb: wb.put(k, v)``
    /// writes on a clean exit and discards everything on an exception.
    #[pyo3(signature = (*, transaction = false, sync = None))]
    fn write_batch(slf: Py<Self>, transaction: bool, sync: Option<bool>) -> PyWriteBatch {
        let sync = slf.get().write_options(sync).sync;
        PyWriteBatch {
            db: slf,
            state: Mutex::new(Some(strata::WriteBatch::new())),
            sync,
            transaction,
        }
    }

    /// plyvel's raw iterator (``strata.RawIterator``): a cursor on one entry at a time,
    /// ``seek_to_first()``, ``seek(k)``, ``next()``, ``prev()``, ``valid()``, ``key()``.
    #[pyo3(signature = (*, verify_checksums = false, fill_cache = true))]
    fn raw_iterator<'py>(
        slf: Py<Self>,
        py: Python<'py>,
        verify_checksums: bool,
        fill_cache: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = verify_checksums;
        raw_iterator(slf, py, None, fill_cache)
    }

    /// A consistent view of the database as it is now: ``with db.snapshot() as snap:``.
    fn snapshot(slf: Py<Self>, py: Python<'_>) -> PyResult<PySnapshot> {
        let snapshot = slf.get().with(py, |db| Ok(db.snapshot()))?;
        Ok(PySnapshot {
            db: slf,
            snapshot: Mutex::new(Some(snapshot)),
        })
    }

    /// An iterator over the database, pulling entries from the engine as it goes.
    ///
    /// ``start`` and ``stop`` bound the keys (``include_start`` and ``include_stop`` say
    /// whether the bounds themselves count); ``prefix`` takes the keys that begin with it
    /// instead. ``reverse`` goes from the largest key down. It yields ``(key, value)``
    /// tuples, or keys or values alone with ``include_value=False`` or
    /// ``include_key=False``. ``snapshot`` reads as of a ``Snapshot``.
    #[pyo3(signature = (
        start = None,
        stop = None,
        prefix = None,
        reverse = false,
        include_start = true,
        include_stop = false,
        include_key = true,
        include_value = true,
        snapshot = None,
        fill_cache = true,
        verify_checksums = false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        slf: Py<Self>,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        include_start: bool,
        include_stop: bool,
        include_key: bool,
        include_value: bool,
        snapshot: Option<PyRef<'_, PySnapshot>>,
        fill_cache: bool,
        verify_checksums: bool,
    ) -> PyResult<PyIterator> {
        // Every block read is checked, asked or not.
        let _ = verify_checksums;
        let bounds = Bounds::new(
            optional_bytes(start, "start")?,
            optional_bytes(stop, "stop")?,
            optional_bytes(prefix, "prefix")?,
            (include_start, include_stop),
            &slf.get().comparator,
        )
        .map_err(PyTypeError::new_err)?;
        let snapshot = match snapshot {
            Some(s) => {
                if !s.db.is(&slf) {
                    return Err(PyValueError::new_err(
                        "the snapshot belongs to another database",
                    ));
                }
                Some(s.held()?)
            }
            None => None,
        };
        PyIterator::open(
            slf,
            py,
            bounds,
            snapshot,
            reverse,
            (include_key, include_value),
            fill_cache,
        )
    }

    /// Compacts the keys in ``[start, stop]`` (the whole database by default) down the tree,
    /// dropping what deletions and overwrites left behind.
    #[pyo3(signature = (start = None, stop = None))]
    fn compact_range(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let start = optional_bytes(start, "start")?;
        let stop = optional_bytes(stop, "stop")?;
        self.with(py, |db| {
            Ok(db.compact_range(start.as_deref(), stop.as_deref())?)
        })
    }

    /// Writes the memtable to a table file and waits for it.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |db| Ok(db.flush()?))
    }

    /// Makes every write so far durable against power loss (fsyncs the log).
    fn sync_wal(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |db| Ok(db.sync_wal()?))
    }

    /// A consistent copy of the database in ``path`` (a new directory), made while writes
    /// go on; it opens as a database.
    fn checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        self.with(py, |db| Ok(db.checkpoint(&path)?))
    }

    /// The approximate bytes the keys in ``[start, stop)`` take on disk and in the memtables
    /// (plyvel's ``approximate_size``).
    fn approximate_size(
        &self,
        py: Python<'_>,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let range = [(bytes_of(start, "start")?, bytes_of(stop, "stop")?)];
        let sizes = self.with(py, |db| Ok(db.approximate_sizes(&range)?))?;
        Ok(sizes.first().copied().unwrap_or(0))
    }

    /// ``approximate_size`` of each ``(start, stop)`` pair, as a list (plyvel's
    /// ``approximate_sizes``).
    #[pyo3(signature = (*ranges))]
    fn approximate_sizes(
        &self,
        py: Python<'_>,
        ranges: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<Vec<u64>> {
        let mut pairs = Vec::with_capacity(ranges.len());
        for r in ranges.iter() {
            let (start, stop): (Bound<'_, PyAny>, Bound<'_, PyAny>) = r.extract()?;
            pairs.push((
                bytes_of(&start, "start")?.into_owned(),
                bytes_of(&stop, "stop")?.into_owned(),
            ));
        }
        self.with(py, |db| Ok(db.approximate_sizes(&pairs)?))
    }

    /// The value of a LevelDB or RocksDB property (``b"leveldb.stats"``,
    /// ``b"rocksdb.estimate-num-keys"``, ...) as bytes, or ``None`` for a name it does not
    /// know (plyvel's ``get_property``).
    fn get_property(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyBytes>>> {
        let name = String::from_utf8_lossy(&bytes_of(name, "name")?).into_owned();
        let value = self.with(py, |db| Ok(db.property(&name)))?;
        Ok(value.map(|v| PyBytes::new(py, v.as_bytes()).unbind()))
    }

    /// The engine's counters and the shape of its tree, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |db| Ok(db.stats()))?;
        let d = PyDict::new(py);
        let levels = PyList::empty(py);
        for (i, l) in s.levels.iter().enumerate() {
            let level = PyDict::new(py);
            level.set_item("level", i)?;
            level.set_item("files", l.files)?;
            level.set_item("bytes", l.bytes)?;
            level.set_item("target_bytes", l.target_bytes)?;
            level.set_item("filter_bits_per_key", l.filter_bits_per_key)?;
            levels.append(level)?;
        }
        d.set_item("levels", levels)?;
        d.set_item("sst_bytes", s.sst_bytes)?;
        d.set_item("wal_bytes", s.wal_bytes)?;
        d.set_item("memtable_bytes", s.memtable_bytes)?;
        d.set_item("immutable_memtables", s.immutable_memtables)?;
        d.set_item("recycled_memtable_bytes", s.recycled_memtable_bytes)?;
        d.set_item("block_cache_hits", s.block_cache_hits)?;
        d.set_item("block_cache_misses", s.block_cache_misses)?;
        d.set_item("block_cache_bytes", s.block_cache_bytes)?;
        d.set_item("block_cache_capacity", s.block_cache_capacity)?;
        d.set_item("expected_false_positives", s.expected_false_positives)?;
        d.set_item("filter_false_positives", s.filter_false_positives)?;
        d.set_item("user_bytes_written", s.user_bytes_written)?;
        d.set_item("wal_bytes_written", s.wal_bytes_written)?;
        d.set_item("flush_bytes_written", s.flush_bytes_written)?;
        d.set_item("compaction_bytes_written", s.compaction_bytes_written)?;
        d.set_item("compaction_bytes_read", s.compaction_bytes_read)?;
        d.set_item("write_amplification", s.write_amplification())?;
        d.set_item("flushes", s.flushes)?;
        d.set_item("compactions", s.compactions)?;
        d.set_item("compaction_pending", s.compaction_pending)?;
        d.set_item("write_stall_micros", s.write_stall_micros)?;
        d.set_item("last_sequence", s.last_sequence)?;
        d.set_item("live_snapshots", s.live_snapshots)?;
        d.set_item("poisoned", s.poisoned)?;
        Ok(d)
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        match self.get_with(py, key, &ReadOptions::default())? {
            Some(v) => Ok(v),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value, None)
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.delete(py, key, None)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.get_with(py, key, &ReadOptions::default())?.is_some())
    }

    /// The keys, in order.
    fn __iter__(slf: Py<Self>, py: Python<'_>) -> PyResult<PyIterator> {
        let order = slf.get().comparator.clone();
        let bounds =
            Bounds::new(None, None, None, (true, false), &order).map_err(PyTypeError::new_err)?;
        PyIterator::open(slf, py, bounds, None, false, (true, false), true)
    }
}

/// Writes gathered in memory and applied atomically by ``write()`` or on exit from
/// ``with db.write_batch() as wb:``. An exception inside the block discards them with
/// ``write_batch(transaction=True)``; without, they are written all the same (plyvel's rule).
#[pyclass(module = "strata", name = "WriteBatch", frozen)]
struct PyWriteBatch {
    db: Py<PyDb>,
    /// `None` once written or discarded by a context manager's exit.
    state: Mutex<Option<strata::WriteBatch>>,
    sync: bool,
    /// A ``with`` block that raises discards the batch (plyvel's ``transaction=True``);
    /// otherwise what was gathered is written all the same.
    transaction: bool,
}

impl PyWriteBatch {
    fn edit(&self, f: impl FnOnce(&mut strata::WriteBatch)) -> PyResult<()> {
        match lock(&self.state).as_mut() {
            Some(batch) => {
                f(batch);
                Ok(())
            }
            None => Err(closed("write batch")),
        }
    }
}

#[pymethods]
impl PyWriteBatch {
    /// Adds ``key = value`` to the batch.
    fn put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (key, value) = (bytes_of(key, "key")?, bytes_of(value, "value")?);
        self.edit(|b| b.put(&key, &value))
    }

    /// Adds the removal of ``key`` to the batch.
    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_of(key, "key")?;
        self.edit(|b| b.delete(&key))
    }

    /// Adds the removal of every key in ``[start, stop)`` to the batch.
    fn delete_range(&self, start: &Bound<'_, PyAny>, stop: &Bound<'_, PyAny>) -> PyResult<()> {
        let (start, stop) = (bytes_of(start, "start")?, bytes_of(stop, "stop")?);
        self.edit(|b| b.delete_range(&start, &stop))
    }

    /// Forgets the writes gathered so far.
    fn clear(&self) -> PyResult<()> {
        self.edit(|b| b.clear())
    }

    /// Adds the writes gathered in ``other`` after this batch's own.
    fn append(&self, other: &Bound<'_, PyWriteBatch>) -> PyResult<()> {
        let theirs = match lock(&other.get().state).as_ref() {
            Some(b) => b.clone(),
            None => return Err(closed("write batch")),
        };
        self.edit(|b| b.append(&theirs))
    }

    /// The bytes the batch takes in the WAL when written.
    fn approximate_size(&self) -> PyResult<usize> {
        match lock(&self.state).as_ref() {
            Some(b) => Ok(b.approximate_size()),
            None => Err(closed("write batch")),
        }
    }

    /// Applies the gathered writes atomically and empties the batch, which can be filled
    /// and written again.
    fn write(&self, py: Python<'_>) -> PyResult<()> {
        let batch = match lock(&self.state).as_mut() {
            Some(b) => std::mem::take(b),
            None => return Err(closed("write batch")),
        };
        let options = WriteOptions { sync: self.sync };
        self.db.get().with(py, |db| Ok(db.write(batch, options)?))
    }

    fn __len__(&self) -> usize {
        lock(&self.state).as_ref().map_or(0, |b| b.len())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let written = if exc_type.is_none() || !self.transaction {
            self.write(py)
        } else {
            Ok(())
        };
        *lock(&self.state) = None;
        written.map(|()| false)
    }
}

/// A consistent view of the database at the moment it was taken. Release it with
/// ``close()`` or a ``with`` block: while held, compaction keeps what it sees.
#[pyclass(module = "strata", name = "Snapshot", frozen)]
struct PySnapshot {
    db: Py<PyDb>,
    snapshot: Mutex<Option<strata::Snapshot>>,
}

impl PySnapshot {
    fn held(&self) -> PyResult<strata::Snapshot> {
        lock(&self.snapshot)
            .clone()
            .ok_or_else(|| closed("snapshot"))
    }
}

#[pymethods]
impl PySnapshot {
    /// The value of ``key`` as of the snapshot, or ``default``.
    #[pyo3(signature = (key, default = None, *, verify_checksums = false, fill_cache = true))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        verify_checksums: bool,
        fill_cache: bool,
    ) -> PyResult<Py<PyAny>> {
        let _ = verify_checksums;
        let options = ReadOptions {
            snapshot: Some(self.held()?),
            skip_cache: !fill_cache,
            ..ReadOptions::default()
        };
        Ok(match self.db.get().get_with(py, key, &options)? {
            Some(v) => v.into_any(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// ``DB.iterator`` as of the snapshot.
    #[pyo3(signature = (
        start = None,
        stop = None,
        prefix = None,
        reverse = false,
        include_start = true,
        include_stop = false,
        include_key = true,
        include_value = true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        include_start: bool,
        include_stop: bool,
        include_key: bool,
        include_value: bool,
    ) -> PyResult<PyIterator> {
        let db = slf.db.clone_ref(py);
        PyDb::iterator(
            db,
            py,
            start,
            stop,
            prefix,
            reverse,
            include_start,
            include_stop,
            include_key,
            include_value,
            Some(slf),
            true,
            false,
        )
    }

    /// The sequence number the snapshot reads at.
    #[getter]
    fn sequence(&self) -> PyResult<u64> {
        Ok(self.held()?.sequence())
    }

    /// ``(key, value)`` pairs in key order, as of the snapshot: ``for k, v in snap``.
    fn __iter__(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<PyIterator> {
        let db = slf.db.clone_ref(py);
        PyDb::iterator(
            db,
            py,
            None,
            None,
            None,
            false,
            true,
            false,
            true,
            true,
            Some(slf),
            true,
            false,
        )
    }

    /// Releases the snapshot; later calls raise ``ClosedError``.
    fn close(&self) {
        lock(&self.snapshot).take();
    }

    /// ``close()``, under plyvel's other name.
    fn release(&self) {
        self.close();
    }

    /// ``DB.raw_iterator`` as of the snapshot.
    #[pyo3(signature = (*, verify_checksums = false, fill_cache = true))]
    fn raw_iterator<'py>(
        &self,
        py: Python<'py>,
        verify_checksums: bool,
        fill_cache: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = verify_checksums;
        raw_iterator(self.db.clone_ref(py), py, Some(self.held()?), fill_cache)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}

/// A Python iterator over a key range that pulls entries from the engine as it goes, and a
/// cursor as plyvel's: ``prev()``, ``seek(key)``, ``seek_to_start()``, ``seek_to_stop()``.
#[pyclass(module = "strata", name = "Iterator", frozen)]
struct PyIterator {
    db: Py<PyDb>,
    cursor: Mutex<Cursor>,
    include: (bool, bool),
}

impl PyIterator {
    fn open(
        db: Py<PyDb>,
        py: Python<'_>,
        bounds: Bounds,
        snapshot: Option<strata::Snapshot>,
        reverse: bool,
        include: (bool, bool),
        fill_cache: bool,
    ) -> PyResult<PyIterator> {
        if include == (false, false) {
            return Err(PyValueError::new_err(
                "include_key and include_value cannot both be false",
            ));
        }
        let options = ReadOptions {
            snapshot,
            lower_bound: bounds.lower,
            upper_bound: bounds.upper,
            skip_cache: !fill_cache,
            family: None,
        };
        let it = db.get().with(py, |db| Ok(db.iter(&options)?))?;
        Ok(PyIterator {
            db,
            cursor: Mutex::new(Cursor::new(it, reverse, bounds.ends)),
            include,
        })
    }

    /// Runs a movement of the cursor with the GIL released, the database held open while it
    /// runs, and converts the entry it gives.
    fn step(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Cursor) -> Result<Option<Entry>, Closed> + Send,
    ) -> PyResult<Option<Py<PyAny>>> {
        let db = self.db.get();
        let entry = py.detach(|| {
            let open = read(&db.db);
            if open.is_none() {
                return Err(Failure::Closed);
            }
            f(&mut lock(&self.cursor)).map_err(|e| match e {
                Closed::Iterator => Failure::ClosedIterator,
                Closed::Engine(e) => Failure::Engine(e),
            })
        })?;
        let Some((key, value)) = entry else {
            return Ok(None);
        };
        self.convert(py, &key, &value).map(Some)
    }

    /// An entry as the iterator gives it: a pair, the key or the value.
    fn convert(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<Py<PyAny>> {
        let (key, value) = self.bytes_of_entry(py, key, value);
        Self::assemble(py, key, value)
    }

    /// The parts of an entry the iterator gives, as bytes objects. Making them runs no
    /// Python code: bytes objects are not tracked by the garbage collector, so making one
    /// never starts a collection (and with it `__del__` methods).
    fn bytes_of_entry<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
    ) -> (Option<Bound<'py, PyBytes>>, Option<Bound<'py, PyBytes>>) {
        (
            self.include.0.then(|| PyBytes::new(py, key)),
            self.include.1.then(|| PyBytes::new(py, value)),
        )
    }

    fn assemble(
        py: Python<'_>,
        key: Option<Bound<'_, PyBytes>>,
        value: Option<Bound<'_, PyBytes>>,
    ) -> PyResult<Py<PyAny>> {
        Ok(match (key, value) {
            (Some(k), Some(v)) => (k, v).into_pyobject(py)?.into_any().unbind(),
            (Some(k), None) => k.into_any().unbind(),
            (None, Some(v)) => v.into_any().unbind(),
            (None, None) => py.None(),
        })
    }

    /// The next entry when the cursor has read it ahead, made into Python objects while the
    /// GIL stays held: no engine call is made. `None` when there is none, or when the
    /// database or the cursor is busy in another thread (which may be waiting for the GIL,
    /// inside a Python comparator): the caller then takes the way that lets the GIL go.
    /// The pair is built once both locks are let go: a tuple may start a collection,
    /// whose `__del__` methods may use this iterator or close the database.
    fn next_read_ahead(&self, py: Python<'_>) -> Option<PyResult<Option<Py<PyAny>>>> {
        let db = self.db.get();
        let open = db.db.try_read().ok()?;
        open.as_ref()?;
        let mut cursor = self.cursor.try_lock().ok()?;
        let (key, value) = cursor.next_read_ahead(|k, v| self.bytes_of_entry(py, k, v))?;
        drop(cursor);
        drop(open);
        Some(Self::assemble(py, key, value).map(Some))
    }

    fn position(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Cursor) -> Result<(), Closed> + Send,
    ) -> PyResult<()> {
        self.step(py, |c| f(c).map(|()| None)).map(|_| ())
    }
}

#[pymethods]
impl PyIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match self.next_read_ahead(py) {
            Some(entry) => entry,
            None => self.step(py, Cursor::next),
        }
    }

    /// The entry ``next()`` gave last, moving the cursor back over it (``next()`` then gives
    /// it again). Raises ``StopIteration`` where ``next()`` has given nothing.
    fn prev(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.step(py, Cursor::prev)?
            .ok_or_else(|| pyo3::exceptions::PyStopIteration::new_err(()))
    }

    /// Moves the cursor just before ``target``, within the iterator's bounds: ``next()`` then
    /// gives the first key at or after it (for a reverse iterator, the last key before it),
    /// as plyvel's does.
    fn seek(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = bytes_of(target, "target")?;
        self.position(py, |c| c.seek(&target))
    }

    /// Moves the cursor before the smallest key of the range (for a reverse iterator, past
    /// its last entry), as plyvel's does.
    fn seek_to_start(&self, py: Python<'_>) -> PyResult<()> {
        self.position(py, Cursor::seek_to_start)
    }

    /// Moves the cursor past the largest key of the range (for a reverse iterator, before
    /// its first entry), as plyvel's does.
    fn seek_to_stop(&self, py: Python<'_>) -> PyResult<()> {
        self.position(py, Cursor::seek_to_stop)
    }

    /// Releases the files the iterator holds; any later use raises ``ClosedError``. The
    /// cursor is waited for with the GIL let go: another thread may be moving it, inside a
    /// Python comparator that needs the GIL.
    fn close(&self, py: Python<'_>) {
        py.detach(|| lock(&self.cursor).close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// Verifies every checksum of every file of the database in ``path`` (which need not be
/// open) and returns one dict per file: ``path``, ``kind``, ``items`` checked and ``error``
/// (``None``, or the damage found).
#[pyfunction]
fn check<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyList>> {
    let checks = py.detach(|| strata::inspect::check(&path)).map_err(raise)?;
    let list = PyList::empty(py);
    for c in checks {
        let d = PyDict::new(py);
        d.set_item("path", c.path.display().to_string())?;
        d.set_item("kind", format!("{:?}", c.kind).to_lowercase())?;
        d.set_item("items", c.items)?;
        d.set_item("error", c.error.map(|e| e.to_string()))?;
        list.append(d)?;
    }
    Ok(list)
}

/// A raw iterator over the whole database, as of `snapshot` if given.
fn raw_iterator<'py>(
    db: Py<PyDb>,
    py: Python<'py>,
    snapshot: Option<strata::Snapshot>,
    fill_cache: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let order = db.get().comparator.clone();
    let bounds =
        Bounds::new(None, None, None, (true, false), &order).map_err(PyTypeError::new_err)?;
    let it = PyIterator::open(db, py, bounds, snapshot, false, (true, true), fill_cache)?;
    py.import("strata")?.getattr("RawIterator")?.call1((it,))
}

/// Rebuilds the damaged database in ``name`` from what still reads (LevelDB's ``RepairDB``);
/// damaged files go to ``name/lost/``. The options (plyvel's names) shape the tables it
/// writes. Returns the report as text.
#[pyfunction]
#[pyo3(signature = (
    name,
    *,
    paranoid_checks = None,
    write_buffer_size = None,
    max_open_files = None,
    lru_cache_size = None,
    block_size = None,
    block_restart_interval = None,
    max_file_size = None,
    compression = None,
    bloom_filter_bits = None,
    comparator = None,
    comparator_name = None,
))]
#[allow(clippy::too_many_arguments)]
fn repair_db(
    py: Python<'_>,
    name: std::path::PathBuf,
    paranoid_checks: Option<bool>,
    write_buffer_size: Option<usize>,
    max_open_files: Option<usize>,
    lru_cache_size: Option<usize>,
    block_size: Option<usize>,
    block_restart_interval: Option<usize>,
    max_file_size: Option<u64>,
    compression: Option<&str>,
    bloom_filter_bits: Option<usize>,
    comparator: Option<&Bound<'_, PyAny>>,
    comparator_name: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let _ = paranoid_checks;
    let options = open_options(&OpenArgs {
        create_if_missing: false,
        error_if_exists: false,
        write_buffer_size,
        cache_size: None,
        lru_cache_size,
        bloom_bits: None,
        bloom_filter_bits,
        compression,
        block_size,
        block_restart_interval,
        max_open_files,
        max_file_size,
        filter_policy: "uniform",
        comparator,
        comparator_name,
    })?;
    let report = py
        .detach(|| strata::repair(&name, options))
        .map_err(raise)?;
    Ok(report.to_string())
}

/// Deletes the database in ``name`` (LevelDB's ``DestroyDB``); no error when it is gone.
#[pyfunction]
fn destroy_db(py: Python<'_>, name: std::path::PathBuf) -> PyResult<()> {
    py.detach(|| strata::destroy(&name, &Options::default()))
        .map_err(raise)
}

#[pymodule]
fn _strata(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyDb>()?;
    m.add_class::<PyWriteBatch>()?;
    m.add_class::<PySnapshot>()?;
    m.add_class::<PyIterator>()?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(repair_db, m)?)?;
    m.add_function(wrap_pyfunction!(destroy_db, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("CorruptionError", py.get_type::<CorruptionError>())?;
    m.add("IOError", py.get_type::<IOError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    Ok(())
}
