//! Strata: a persistent, ordered key-value store built on a log-structured merge tree.
//!
//! Writes go to a write-ahead log and a concurrent in-memory skiplist; full memtables are
//! flushed to sorted string tables (SSTs) in level 0, and background compaction merges them
//! down a tree of levels whose sizes grow by a fixed ratio. Reads look from the newest data to
//! the oldest, using a Bloom filter and an index per file and a block cache.
//!
//! ```
//! # fn main() -> strata::Result<()> {
//! use strata::{Db, Options, ReadOptions, WriteBatch, WriteOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path(), Options::default())?;
//!
//! let mut batch = WriteBatch::new();
//! batch.put(b"apple", b"red");
//! batch.put(b"banana", b"yellow");
//! db.write(batch, WriteOptions { sync: true })?;
//!
//! let before = db.snapshot();
//! db.delete(b"apple")?;
//! assert_eq!(db.get(b"apple")?, None);
//! let old = ReadOptions { snapshot: Some(before), ..ReadOptions::default() };
//! assert_eq!(db.get_with(b"apple", &old)?, Some(b"red".to_vec()));
//! # Ok(()) }
//! ```
//!
//! The on-disk formats are specified in `docs/format.md`; the durability contract is on
//! [`WriteOptions`].

#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod backup;
mod batch;
mod cache;
mod coding;
mod compaction;
mod compaction_filter;
mod comparator;
pub mod cost_model;
mod db;
mod error;
mod filter_policy;
mod fs;
// The decoders' entry points for the fuzz targets (built with `--cfg fuzzing`) and the
// decoder tests; not part of the API.
#[cfg(any(fuzzing, feature = "test-util"))]
#[doc(hidden)]
pub mod fuzz;

// Turns every checksum check off: for the fuzz targets alone, which cargo-fuzz builds with
// `--cfg fuzzing`.
#[cfg(all(feature = "fuzz-skip-checksums", not(fuzzing)))]
compile_error!(
    "the feature fuzz-skip-checksums is for the fuzz targets (built with --cfg fuzzing)"
);
pub mod inspect;
mod iter;
mod key;
mod listener;
mod log;
mod memory;
mod memtable;
pub mod merge;
mod mutex;
mod options;
mod prefetch;
mod range_del;
mod snapshot;
mod sstable;
mod stats;
mod version;
mod wal;

pub use backup::{BackupEngine, BackupInfo, NewBackup};
pub use batch::{BatchEntry, EntryKind, WriteBatch};
pub use compaction_filter::{CompactionFilter, FilterDecision};
pub use comparator::{BytewiseComparator, Comparator, ReverseBytewiseComparator};
pub use db::{
    ColumnFamily, Db, DbIterator, ReadOptions, RepairReport, Scan, Transaction, UpdatesSince,
    destroy, repair,
};
pub use error::{Error, Result};
pub use filter_policy::{FilterFormat, FilterPolicy};
#[cfg(feature = "test-util")]
pub use fs::{FaultFs, FaultOp};
pub use fs::{
    FileLock, FileMap, FileSystem, MemFs, PendingSync, RandomAccessFile, StdFs, WritableFile,
};
pub use key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use listener::WalListener;
pub use log::RecoveryMode;
pub use memory::process_memory_limit;
pub use merge::MergeOperator;
pub use options::{MergePolicy, Options, WriteOptions};
pub use snapshot::{SequencePin, Snapshot};
pub use sstable::{Compression, FilterKind, IndexKind};
pub use stats::{FamilyStats, FileInfo, LevelStats, Stats};
