//! Optimistic transactions: reads at a snapshot, writes buffered, and a commit that writes
//! them only if nobody else wrote what the transaction read or wrote meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};

use super::Db;
use super::queue::QueuedWrite;
use super::read_options::ReadOptions;
use crate::batch::WriteBatch;
use crate::error::Result;
use crate::options::WriteOptions;
use crate::snapshot::Snapshot;

/// An optimistic transaction, begun by [`Db::transaction`].
///
/// It reads the database as it was when the transaction began (a snapshot), with its own
/// writes laid over it: a [`Transaction::get`] or [`Transaction::scan`] after a
/// [`Transaction::put`] sees the put. Writes wait in the transaction until
/// [`Transaction::commit`], which writes them as one atomic batch through the ordinary write
/// path, so after a crash the transaction is there whole or not at all.
///
/// **Isolation.** Commit checks every key the transaction read (with `get`, and every key a
/// `scan` returned) or wrote: if another writer wrote any of them after the snapshot, the
/// commit fails with [`Error::Conflict`](crate::Error::Conflict) and writes nothing. The
/// check runs as the write-queue leader, so no write comes between it and the commit. This is
/// snapshot isolation with validation of the read set: serializable for transactions that
/// read by key. A scan's range is not validated, only the keys it returned, so a key inserted
/// into a scanned range by another writer (a phantom) does not make the commit fail.
///
/// Dropping a transaction without committing discards its writes.
///
/// ```
/// # fn main() -> strata::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = strata::Db::open(dir.path(), strata::Options::default())?;
/// db.put(b"alice", b"10")?;
/// loop {
///     let mut tx = db.transaction();
///     let balance: u64 = String::from_utf8_lossy(&tx.get(b"alice")?.unwrap()).parse().unwrap();
///     tx.put(b"alice", (balance - 3).to_string().as_bytes());
///     tx.put(b"bob", b"3");
///     match tx.commit(strata::WriteOptions::default()) {
///         Err(e) if e.is_conflict() => continue, // someone wrote alice meanwhile: again
///         other => break other?,
///     }
/// }
/// assert_eq!(db.get(b"alice")?, Some(b"7".to_vec()));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Transaction<'db> {
    db: &'db Db,
    snapshot: Snapshot,
    /// Pending writes, the last per key: `None` deletes.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Keys read from the snapshot, to check at commit.
    read: BTreeSet<Vec<u8>>,
}

impl Db {
    /// Begins an optimistic transaction at a snapshot of the database as it is now.
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction {
            db: self,
            snapshot: self.snapshot(),
            writes: BTreeMap::new(),
            read: BTreeSet::new(),
        }
    }
}

impl Transaction<'_> {
    /// The snapshot the transaction reads at.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn at_snapshot(&self) -> ReadOptions {
        ReadOptions {
            snapshot: Some(self.snapshot.clone()),
            ..ReadOptions::default()
        }
    }

    /// The value of `key`: the transaction's own write of it, or else the snapshot's value.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(pending) = self.writes.get(key) {
            return Ok(pending.clone());
        }
        let value = self.db.get_with(key, &self.at_snapshot())?;
        self.read.insert(key.to_vec());
        Ok(value)
    }

    /// Sets `key` to `value` at commit.
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
    }

    /// Deletes `key` at commit.
    pub fn delete(&mut self, key: &[u8]) {
        self.writes.insert(key.to_vec(), None);
    }

    /// The entries with keys in `range`, in key order (the snapshot's, with the transaction's
    /// own writes over them), collected into a vector. Every key returned joins the keys
    /// checked at commit.
    pub fn scan(
        &mut self,
        range: impl RangeBounds<Vec<u8>> + Clone,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let order = self.db.inner.opts.key_order();
        let cmp = |a: &[u8], b: &[u8]| order.user(a, b);
        // A range that ends before it starts holds nothing.
        let empty = match (range.start_bound(), range.end_bound()) {
            (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e))
                if cmp(s, e).is_gt() =>
            {
                true
            }
            (Bound::Excluded(s), Bound::Excluded(e)) => s == e,
            _ => false,
        };
        if empty {
            return Ok(Vec::new());
        }
        let holds = |k: &[u8]| {
            let after_start = match range.start_bound() {
                Bound::Included(s) => cmp(k, s).is_ge(),
                Bound::Excluded(s) => cmp(k, s).is_gt(),
                Bound::Unbounded => true,
            };
            after_start
                && match range.end_bound() {
                    Bound::Included(e) => cmp(k, e).is_le(),
                    Bound::Excluded(e) => cmp(k, e).is_lt(),
                    Bound::Unbounded => true,
                }
        };
        // The transaction's own writes in the range, in the database's key order.
        let mut own: Vec<(&Vec<u8>, &Option<Vec<u8>>)> =
            self.writes.iter().filter(|(k, _)| holds(k)).collect();
        own.sort_by(|a, b| cmp(a.0, b.0));
        let mut from_db = Vec::new();
        for entry in self.db.scan_with(range, self.at_snapshot(), false)? {
            from_db.push(entry?);
        }
        let mut out = Vec::with_capacity(from_db.len());
        let mut own = own.into_iter().peekable();
        let mut theirs = from_db.into_iter().peekable();
        loop {
            let take_own = match (own.peek(), theirs.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((ok, _)), Some((tk, _))) => cmp(ok, tk).is_le(),
            };
            if take_own {
                let Some((k, v)) = own.next() else { break };
                if theirs.peek().is_some_and(|(tk, _)| tk == k) {
                    theirs.next();
                }
                if let Some(v) = v {
                    out.push((k.clone(), v.clone()));
                }
            } else {
                let Some((k, v)) = theirs.next() else { break };
                self.read.insert(k.clone());
                out.push((k, v));
            }
        }
        Ok(out)
    }

    /// Writes the transaction's writes as one atomic batch, unless another writer wrote a key
    /// the transaction read or wrote after its snapshot: then [`crate::Error::Conflict`], and
    /// nothing is written. A transaction that wrote nothing commits at once.
    pub fn commit(self, options: WriteOptions) -> Result<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (k, v) in &self.writes {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        let mut keys: BTreeSet<Vec<u8>> = self.read;
        keys.extend(self.writes.into_keys());
        batch.validate()?;
        self.db.inner.join_write_queue(
            QueuedWrite::Checked {
                batch,
                snapshot: self.snapshot.seq(),
                keys: keys.into_iter().collect(),
            },
            options.sync,
        )
    }
}
