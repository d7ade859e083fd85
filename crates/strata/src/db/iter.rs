//! Iterators over the whole database: the cursor [`DbIterator`] and the Rust iterator [`Scan`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::family::SuperVersion;
use super::read_options::ReadOptions;
use super::state::DbInner;
use crate::error::Result;
use crate::iter::db_iter::DbIter;
use crate::snapshot::Snapshot;
use crate::version::Version;

impl DbInner {
    pub(super) fn iter(self: &Arc<Self>, options: &ReadOptions) -> Result<DbIterator> {
        let family = self.family_of(options);
        let (seq, sv) = self.read_view(options);
        // The iterator keeps what it reads, however long it lives.
        let sv = arc_swap::Guard::into_inner(sv);
        let merged = super::merged::internal_iter(&sv, !options.skip_cache);
        let tombstones = self.all_tombstones(&sv)?;
        Ok(DbIterator {
            inner: DbIter::new(
                Box::new(merged),
                seq,
                options.lower_bound.clone(),
                options.upper_bound.clone(),
                family.opts.merge_operator.clone(),
                tombstones,
                sv.mem.order().clone(),
            ),
            sampler: ReadSampler::new(Arc::downgrade(self), family.id),
            sv,
            _snapshot: options.snapshot.clone(),
        })
    }
}

/// A cursor over the database in key order, forward and backward.
///
/// ```
/// # fn main() -> strata::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = strata::Db::open(dir.path(), strata::Options::default())?;
/// db.put(b"a", b"1")?;
/// db.put(b"b", b"2")?;
/// let mut it = db.iter(&strata::ReadOptions::default())?;
/// it.seek_to_last()?;
/// assert_eq!(it.key(), b"b");
/// it.prev()?;
/// assert_eq!(it.key(), b"a");
/// it.prev()?;
/// assert!(!it.valid());
/// # Ok(()) }
/// ```
pub struct DbIterator {
    inner: DbIter,
    sv: Arc<SuperVersion>,
    sampler: ReadSampler,
    _snapshot: Option<Snapshot>,
}

/// Bytes an iterator reads, on average, between two samples of its position.
const READ_SAMPLE_BYTES: u64 = 1 << 20;

/// Samples the keys an iterator reads for read-triggered compaction, as LevelDB does: about
/// once per [`READ_SAMPLE_BYTES`] of keys and values (at random, so that no pattern of
/// reads dodges it), the key is charged to the files that may hold it (see
/// `Version::charge_sample`). Scans and seeks pay for every sorted run they merge, and a
/// lookup charges only the runs it consults, so without samples a tree read only by scans
/// would never be asked to change.
struct ReadSampler {
    db: Weak<DbInner>,
    /// The column family the iterator reads.
    family: u32,
    until: u64,
    rng: u64,
}

impl ReadSampler {
    fn new(db: Weak<DbInner>, family: u32) -> Self {
        // Distinct iterators start at distinct points of the sequence (never 0, where
        // xorshift stays).
        static SEEDS: AtomicU64 = AtomicU64::new(0);
        let rng = SEEDS
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            | 1;
        let mut s = ReadSampler {
            db,
            family,
            until: 0,
            rng,
        };
        s.until = s.period();
        s
    }

    /// A period drawn uniformly from `[0, 2 * READ_SAMPLE_BYTES)`.
    fn period(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % (2 * READ_SAMPLE_BYTES)
    }

    /// Counts the entry the iterator is on; on a sample, charges its key.
    fn read(&mut self, version: &Version, key: &[u8], value_len: usize) {
        let n = (key.len() + value_len) as u64;
        if n < self.until {
            self.until -= n;
            return;
        }
        self.until = self.period();
        if let Some(rc) = version.charge_sample(key)
            && let Some(db) = self.db.upgrade()
        {
            db.ask_read_compaction(self.family, rc);
        }
    }
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("valid", &self.inner.valid())
            .finish()
    }
}

impl DbIterator {
    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.inner.valid()
    }
    /// Positions on the first key (at or after the lower bound).
    pub fn seek_to_first(&mut self) -> Result<()> {
        let r = self.inner.seek_to_first();
        self.sample(r)
    }
    /// Positions on the last key (before the upper bound).
    pub fn seek_to_last(&mut self) -> Result<()> {
        let r = self.inner.seek_to_last();
        self.sample(r)
    }
    /// Positions on the first key at or after `key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<()> {
        let r = self.inner.seek(key);
        self.sample(r)
    }
    /// Positions on the last key at or before `key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> Result<()> {
        let r = self.inner.seek_for_prev(key);
        self.sample(r)
    }
    /// Moves to the next key. Requires: `valid()`. (A cursor, not an `Iterator`: moving can
    /// fail; [`Db::scan`](crate::Db::scan) gives an `Iterator`.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        let r = self.inner.next();
        self.sample(r)
    }
    /// Moves to the previous key. Requires: `valid()`.
    pub fn prev(&mut self) -> Result<()> {
        let r = self.inner.prev();
        self.sample(r)
    }
    fn sample(&mut self, r: Result<()>) -> Result<()> {
        if r.is_ok() && self.inner.valid() {
            let (key, value) = (self.inner.key(), self.inner.value());
            self.sampler.read(&self.sv.version, key, value.len());
        }
        r
    }
    /// The current key. Requires: `valid()`.
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }
    /// The current value. Requires: `valid()`.
    pub fn value(&self) -> &[u8] {
        self.inner.value()
    }
}

/// A Rust iterator over a key range, from [`Db::scan`](crate::Db::scan) or
/// [`Db::scan_rev`](crate::Db::scan_rev).
pub struct Scan {
    pub(super) it: DbIterator,
    pub(super) reverse: bool,
    pub(super) started: bool,
    pub(super) done: bool,
    /// A key left out: the excluded start of a range in an order other than bytewise.
    pub(super) skip: Option<Vec<u8>>,
    /// The included end of a range in such an order: the scan stops after it.
    pub(super) through: Option<Vec<u8>>,
    pub(super) order: crate::comparator::KeyOrder,
}

impl std::fmt::Debug for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("reverse", &self.reverse)
            .finish_non_exhaustive()
    }
}

impl Scan {
    /// Moves to the next entry of the range without copying it: true while there is one,
    /// read in place with [`Scan::key`] and [`Scan::value`]. The `Iterator` impl copies each
    /// entry out; a caller that only looks at entries steps instead.
    pub fn step(&mut self) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        loop {
            let step = if !self.started {
                self.started = true;
                match (self.reverse, &self.through) {
                    (true, Some(end)) => self.it.seek_for_prev(&end.clone()),
                    (true, None) => self.it.seek_to_last(),
                    (false, _) => self.it.seek_to_first(),
                }
            } else if self.reverse {
                self.it.prev()
            } else {
                self.it.next()
            };
            if let Err(e) = step {
                self.done = true;
                return Err(e);
            }
            let key = self.it.valid().then(|| self.it.key());
            let past_end = match (key, &self.through) {
                (Some(k), Some(end)) => self.order.user(k, end).is_gt(),
                _ => false,
            };
            let skipped = key.is_some_and(|k| self.skip.as_deref() == Some(k));
            if key.is_none() || past_end || (skipped && self.reverse) {
                self.done = true;
                return Ok(false);
            }
            if !skipped {
                return Ok(true);
            }
        }
    }

    /// The key of the entry [`Scan::step`] moved to.
    pub fn key(&self) -> &[u8] {
        self.it.key()
    }

    /// The value of the entry [`Scan::step`] moved to.
    pub fn value(&self) -> &[u8] {
        self.it.value()
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step() {
            Ok(true) => Some(Ok((self.it.key().to_vec(), self.it.value().to_vec()))),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
