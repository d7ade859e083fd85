//! Column families: several trees in one database. Each has its own options and levels;
//! they share the WAL, the sequence numbers (so one snapshot covers them all), the MANIFEST
//! and the block cache. A write batch spans them atomically, since it is one WAL record.
//!
//! Memtables switch together: when one family's memtable is full, every family's is made
//! immutable, and the flush of that generation writes one table per family that holds
//! writes, all in one MANIFEST edit (as RocksDB's atomic flush). So a WAL file is deleted
//! exactly when every family's writes in it are in tables, and the MANIFEST keeps one
//! oldest live WAL for the whole database.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arc_swap::{ArcSwap, Guard};

use crate::batch::WriteBatch;
use crate::compaction::LevelTargets;
use crate::compaction::TreeModel;
use crate::key::{NUM_LEVELS, SeqNo};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::sstable::TableOptions;
use crate::version::{ReadCompaction, Version};

/// What readers see: the memtables and the level structure, installed together.
pub(crate) struct SuperVersion {
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imm: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
    /// The newest sequence number up to which the flushes and compactions behind these
    /// tables folded or dropped versions: a read below it could miss what it should see.
    pub horizon: SeqNo,
}

/// A column family's fixed part: what it is and how its tree is built.
pub(crate) struct Family {
    pub id: u32,
    pub name: String,
    /// Of these, the family uses those that shape its tree: the write buffer, the filter
    /// policy, compression, block size and the rest of the table options, the size ratio,
    /// level-1 target, level-0 compaction trigger and file size, the merge operator and the
    /// compaction filter. The rest are the database's, from the options it was opened with:
    /// the file system, caches, WAL recovery, background threads, the level-0 counts that
    /// slow and stop writers (counted in the family with the most level-0 files), the
    /// immutable memtables allowed, the memtable age, idle merges and read-triggered
    /// compactions.
    pub opts: Options,
    pub table_options: TableOptions,
    pub targets: LevelTargets,
    /// What readers of this family see. A swap rather than a lock: a point lookup takes it
    /// without a write to shared memory (see [`Family::super_version_guard`]).
    pub super_version: ArcSwap<SuperVersion>,
    /// Set when a drop of the family begins: compactions no longer pick it, and batches that
    /// name it are refused. Once dropped, its handles read it empty.
    pub dropped: AtomicBool,
}

impl Family {
    pub(crate) fn new(id: u32, name: &str, opts: Options, sv: SuperVersion) -> Family {
        Family {
            id,
            name: name.to_string(),
            table_options: table_options(&opts),
            targets: LevelTargets::of(&opts),
            opts,
            super_version: ArcSwap::from_pointee(sv),
            dropped: AtomicBool::new(false),
        }
    }

    pub(crate) fn super_version(&self) -> Arc<SuperVersion> {
        self.super_version.load_full()
    }

    /// [`Family::super_version`] for a read that ends soon: it counts no reference unless
    /// this thread already holds several guards of swaps (the tables' filters and indexes
    /// take them too) or a store races with it. A point lookup took a lock and counted a
    /// reference, four atomic writes to lines every reader shares (docs/design.md).
    pub(crate) fn super_version_guard(&self) -> Guard<Arc<SuperVersion>> {
        self.super_version.load()
    }

    /// Publishes `sv` to this family's readers.
    pub(crate) fn set_super_version(&self, sv: SuperVersion) {
        self.super_version.store(Arc::new(sv));
    }

    /// The tree's shape as Monkey's filter allocation sees it.
    pub(crate) fn tree_model(&self) -> TreeModel<'_> {
        TreeModel {
            targets: &self.targets,
            buffer_bytes: self.opts.write_buffer_size as u64,
        }
    }
}

/// How tables are built under `opts`.
pub(crate) fn table_options(opts: &Options) -> TableOptions {
    TableOptions {
        block_size: opts.block_size,
        restart_interval: opts.block_restart_interval,
        bloom_bits_per_key: opts.filter_policy.bits_per_key() as f64,
        filter_format: opts.filter_format,
        compression: opts.compression,
        index_kind: opts.index_kind,
        filter_kind: opts.filter_kind,
        align_blocks: opts.block_align
            && opts.compression == crate::Compression::None
            && opts.block_size == crate::sstable::PAGE_BYTES,
        zstd_dictionary_bytes: opts.zstd_dictionary_bytes,
        order: opts.key_order(),
    }
}

/// A column family's changing part, under the database's state lock.
pub(crate) struct FamilyState {
    pub family: Arc<Family>,
    pub mem: Arc<MemTable>,
    /// Immutable memtables, oldest first. Every family has one per generation waiting to
    /// be flushed (empty when it took no writes), so the lists line up across families.
    pub imm: VecDeque<Arc<MemTable>>,
    pub busy_levels: [bool; NUM_LEVELS],
    /// A file reads consulted in vain until its allowance ran out, to compact when no level
    /// needs it more.
    pub read_compaction: Option<ReadCompaction>,
    /// Writes stopped with the tree out of shape: the next compaction of this family merges
    /// every level into the deepest (see [`crate::compaction::idle_merge`]).
    pub idle_merge_requested: bool,
}

/// A handle on a column family, from [`Db::create_family`](crate::Db::create_family) or
/// [`Db::family`](crate::Db::family). Reads name it in
/// [`ReadOptions::family`](crate::ReadOptions::family), writes in
/// [`WriteBatch::put_cf`](crate::WriteBatch::put_cf) and its siblings. Once the family is
/// dropped, writes through a handle fail and reads find it empty.
#[derive(Clone)]
pub struct ColumnFamily {
    pub(crate) family: Arc<Family>,
}

impl ColumnFamily {
    /// The family's name.
    pub fn name(&self) -> &str {
        &self.family.name
    }

    /// The family's id, as its WAL records and MANIFEST edits name it (0: the default one).
    pub fn id(&self) -> u32 {
        self.family.id
    }
}

impl std::fmt::Debug for ColumnFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnFamily")
            .field("name", &self.family.name)
            .field("id", &self.family.id)
            .finish()
    }
}

/// Writes into a named column family; the WAL record names the family's id.
impl WriteBatch {
    /// [`WriteBatch::put`] into column family `cf`.
    pub fn put_cf(&mut self, cf: &ColumnFamily, key: &[u8], value: &[u8]) {
        self.put_in(cf.id(), key, value);
    }

    /// [`WriteBatch::delete`] in column family `cf`.
    pub fn delete_cf(&mut self, cf: &ColumnFamily, key: &[u8]) {
        self.delete_in(cf.id(), key);
    }

    /// [`WriteBatch::merge`] in column family `cf`, folded by that family's merge operator.
    pub fn merge_cf(&mut self, cf: &ColumnFamily, key: &[u8], operand: &[u8]) {
        self.merge_in(cf.id(), key, operand);
    }

    /// [`WriteBatch::delete_range`] in column family `cf`.
    pub fn delete_range_cf(&mut self, cf: &ColumnFamily, begin: &[u8], end: &[u8]) {
        self.delete_range_in(cf.id(), begin, end);
    }
}
