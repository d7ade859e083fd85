//! Reads an SST file: point lookups through filter, index and one data block, and
//! bidirectional iteration. The filter and the root index block are read once and held by
//! the open table, as LevelDB and RocksDB (by default) hold them: in the block cache, a stream
//! of data blocks would evict them, and every lookup would read them again whole. Each is
//! read on its own first use, so a lookup the filter answers never reads the index. A budget
//! shared by the tables bounds what they hold ([`super::pinned`]). Data blocks, lower index
//! levels and the partitions of a partitioned filter (whose index the table holds) come from
//! the block cache when they are there.

use std::cmp::Ordering;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{self, AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwapOption, Guard};

use super::block::{Block, BlockOrder};
use super::filter::{BloomFilter, FilterRef};
use super::format::{BlockHandle, FOOTER_BYTES, FilterKind, Footer, FooterError};
use super::mapped::{MappedPages, MappedTable};
use super::pinned::PinBudget;
use crate::cache::{BlockCache, Priority};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::fs::RandomAccessFile;
use crate::iter::InternalIterator;
use crate::key::{FileNumber, ParsedKey, SeqNo, parse_internal_key};
use crate::mutex::lock;
use crate::range_del::{Fragmented, RangeTombstone};

/// An open SST file.
pub(crate) struct Table {
    pub(super) file: Arc<dyn RandomAccessFile>,
    pub(super) path: PathBuf,
    pub(super) number: FileNumber,
    pub(super) footer: Footer,
    pub(super) cache: Arc<BlockCache>,
    /// The filter, read on first use and held until the budget lets it go.
    pub(super) filter: ArcSwapOption<PinnedFilter>,
    /// The root block of the index, read on first use and held until the budget lets it go.
    pub(super) index: ArcSwapOption<RootIndex>,
    /// Set by each use of `filter` or `index`, cleared by the budget's clock hand.
    pub(super) used: AtomicBool,
    /// Held while `filter` or `index` is read from the file, so that racing lookups read it
    /// once.
    pub(super) loading: Mutex<()>,
    /// The budget `filter` and `index` count against; without one, they are held while the
    /// table is open.
    pub(super) budget: Option<Arc<PinBudget>>,
    /// The file mapped into memory, for reads that fill the cache; see [`super::mapped`].
    pub(super) mapped: Option<(Arc<MappedPages>, Arc<MappedTable>)>,
    /// The range tombstones, read on first use (for files that have them).
    pub(super) range_dels: Mutex<Option<Arc<TableRangeDels>>>,
    /// Counts lookups whose key the filter passed and the table did not hold.
    pub(super) false_positives: Option<Arc<AtomicU64>>,
    /// The order of the table's keys.
    pub(super) order: KeyOrder,
    /// The zstd dictionary of a table that has one, read with the first block that needs it
    /// and held until the budget lets it go.
    pub(super) zstd_dictionary: ArcSwapOption<super::format::ZstdDictionary>,
}

/// A table's range tombstones, as written and fragmented.
pub(crate) struct TableRangeDels {
    pub list: Vec<RangeTombstone>,
    pub fragmented: Arc<Fragmented>,
}

/// A table's filter as its table holds it: the lookup reads it in every table it consults.
pub(crate) enum PinnedFilter {
    Whole(BloomFilter),
    /// The index of the filter's partitions, by the last internal key each covers.
    Partitions(RootIndex),
}

impl PinnedFilter {
    /// Hints that [`Table::may_contain`] of `user_key` will come soon, where the filter is
    /// held whole.
    pub(crate) fn prefetch(&self, user_key: &[u8]) {
        if let PinnedFilter::Whole(f) = self {
            f.view().prefetch(user_key);
        }
    }

    fn size(&self) -> usize {
        match self {
            PinnedFilter::Whole(f) => f.size(),
            PinnedFilter::Partitions(index) => index.size(),
        }
    }
}

/// A table's filter or root index, held for the length of a lookup: the budget may let the
/// table's copy go meanwhile, but not this one.
pub(crate) struct Held<T>(Guard<Option<Arc<T>>>);

impl<T> Deref for Held<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self.0.as_deref() {
            Some(p) => p,
            // Built only from a loaded value (`Table::held`).
            None => unreachable!("a Held holds nothing"),
        }
    }
}

/// The root block of a table's index, held open, with the handle of each of its entries
/// decoded side by side. A lookup whose search heads settle where it lands takes the handle
/// from here and reads nothing of the block itself.
pub(crate) struct RootIndex {
    pub(super) block: Arc<Block>,
    /// The handle of every entry, by restart point (a root block restarts at every entry);
    /// empty when the block does not, and lookups search it whole.
    pub(super) handles: Vec<BlockHandle>,
}

impl RootIndex {
    /// Decodes the handles of `block`; a block that does not restart at every entry, or holds
    /// an entry that does not decode, is searched whole instead (and the damage reported by
    /// the lookups that reach it).
    fn new(block: Block, order: &KeyOrder) -> RootIndex {
        let block = Arc::new(block);
        let mut handles = Vec::with_capacity(block.num_restarts());
        let mut it = block.iter_ref(BlockOrder::Internal(order.clone()));
        let mut whole = it.seek_to_first().is_ok();
        while whole && it.valid() {
            match BlockHandle::decode_varint(it.value()) {
                Ok(h) => handles.push(h),
                Err(_) => whole = false,
            }
            whole = whole && it.next().is_ok();
        }
        if !whole || handles.len() != block.num_restarts() {
            handles = Vec::new();
        }
        RootIndex { block, handles }
    }

    fn size(&self) -> usize {
        self.block.size() + self.handles.len() * size_of::<BlockHandle>()
    }

    /// The handle a seek for `target` lands on, when the search heads settle it: `Some(None)`
    /// when every entry is below `target`.
    fn settled(&self, target: &[u8]) -> Option<Option<BlockHandle>> {
        if self.handles.is_empty() {
            return None;
        }
        let i = self.block.restart_settled_by_heads(target)?;
        Some(self.handles.get(i).copied())
    }
}

/// A found entry.
pub(crate) struct TableEntry {
    pub kind: crate::key::ValueKind,
    pub value: Vec<u8>,
    /// The sequence number the entry was written at.
    pub seq: crate::key::SeqNo,
}

impl Table {
    /// Opens a table, checking its footer.
    pub(crate) fn open(
        file: Arc<dyn RandomAccessFile>,
        path: &Path,
        number: FileNumber,
        cache: Arc<BlockCache>,
        order: KeyOrder,
    ) -> Result<Table> {
        let size = file.size().map_err(|e| Error::io("stat", path, e))?;
        if size < FOOTER_BYTES as u64 {
            return Err(Error::corruption(path, 0, "file too short to be an SST"));
        }
        let footer_offset = size - FOOTER_BYTES as u64;
        let bytes = file
            .read_at(footer_offset, FOOTER_BYTES)
            .map_err(|e| Error::io("read", path, e))?;
        let footer = match Footer::decode(&bytes) {
            Ok(f) => f,
            Err(FooterError::Damaged(e)) => return Err(e.at(path, footer_offset)),
            Err(FooterError::Version(v)) => {
                return Err(Error::UnsupportedFormat {
                    file: path.to_path_buf(),
                    reason: format!("SST format version {v}"),
                });
            }
        };
        for h in [footer.filter, footer.index, footer.properties] {
            if !h.ends_by(footer_offset) {
                return Err(Error::corruption(
                    path,
                    footer_offset,
                    "footer points past the file",
                ));
            }
        }
        Ok(Table {
            file,
            path: path.to_path_buf(),
            number,
            footer,
            cache,
            filter: ArcSwapOption::empty(),
            index: ArcSwapOption::empty(),
            used: AtomicBool::new(false),
            loading: Mutex::new(()),
            budget: None,
            mapped: None,
            range_dels: Mutex::new(None),
            false_positives: None,
            order,
            zstd_dictionary: ArcSwapOption::empty(),
        })
    }

    /// The order of the table's internal keys, for a cursor over one of its blocks.
    pub(crate) fn block_order(&self) -> BlockOrder {
        BlockOrder::Internal(self.order.clone())
    }

    /// The newest sequence number in the table, from its properties (`None` for a file
    /// written before the property existed).
    pub(crate) fn largest_seq(&self) -> Result<Option<SeqNo>> {
        Ok(self
            .properties()?
            .iter()
            .find(|(n, _)| n == super::builder::prop::LARGEST_SEQ)
            .map(|(_, v)| SeqNo(*v)))
    }

    /// The table's range tombstones; `None` for a file without any.
    pub(crate) fn range_tombstones(&self) -> Result<Option<Arc<TableRangeDels>>> {
        if !self.footer.range_deletions {
            return Ok(None);
        }
        let mut held = lock(&self.range_dels);
        if let Some(r) = held.as_ref() {
            return Ok(Some(r.clone()));
        }
        let handle = self.named_block(
            &self.properties()?,
            super::builder::prop::RANGE_DEL_OFFSET,
            super::builder::prop::RANGE_DEL_SIZE,
            "range-deletion block",
        )?;
        let block = self.read_block(handle, false)?;
        let mut it = block.iter(self.block_order());
        let mut list = Vec::new();
        it.seek_to_first()
            .map_err(|e| self.with_path(e, handle.offset))?;
        while it.valid() {
            let p = parse_internal_key(it.key())
                .filter(|p| p.kind == crate::key::ValueKind::RangeDelete)
                .ok_or_else(|| {
                    Error::corruption(&self.path, handle.offset, "malformed range tombstone")
                })?;
            list.push(RangeTombstone {
                begin: p.user_key.to_vec(),
                end: it.value().to_vec(),
                seq: p.seq,
            });
            it.next().map_err(|e| self.with_path(e, handle.offset))?;
        }
        let r = Arc::new(TableRangeDels {
            fragmented: Arc::new(Fragmented::new(&self.order, &list)),
            list,
        });
        *held = Some(r.clone());
        Ok(Some(r))
    }

    /// The block whose offset and size the properties `props` hold under these names.
    pub(super) fn named_block(
        &self,
        props: &[(String, u64)],
        offset: &str,
        size: &str,
        what: &str,
    ) -> Result<BlockHandle> {
        let prop = |name: &str| props.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let at = self.footer.properties.offset;
        let (offset, size) = match (prop(offset), prop(size)) {
            (Some(offset), Some(size)) => (offset, size),
            _ => {
                let why = format!("{what} not named in the properties");
                return Err(Error::corruption(&self.path, at, why));
            }
        };
        // Written before the properties, as every block they name: a handle that reaches
        // past them is damage, and must not size a read (or its allocation) beyond the file.
        let handle = BlockHandle { offset, size };
        if !handle.ends_by(at) {
            let why = format!("{what} lies past the properties");
            return Err(Error::corruption(&self.path, at, why));
        }
        Ok(handle)
    }

    /// Counts in `counter` the lookups whose key the filter passed and the table did not
    /// hold (see [`Table::false_positive`]).
    pub(crate) fn with_false_positive_counter(mut self, counter: &Arc<AtomicU64>) -> Table {
        self.false_positives = Some(counter.clone());
        self
    }

    /// Counts a lookup whose key the filter passed and this table did not hold.
    pub(crate) fn false_positive(&self) {
        if let Some(c) = &self.false_positives {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Counts this table's pinned blocks against `budget`, which lets them go when other
    /// tables' blocks are more in use.
    pub(crate) fn with_budget(mut self, budget: &Arc<PinBudget>) -> Table {
        self.budget = Some(budget.clone());
        self
    }

    /// Reads this table's blocks through a mapping of its file, under `pages`' budget, where
    /// the file system maps files.
    pub(crate) fn with_mapping(mut self, pages: &Arc<MappedPages>) -> Table {
        self.mapped = self
            .file
            .map()
            .and_then(|map| pages.register(map))
            .map(|table| (pages.clone(), table));
        self
    }

    /// The filter, read from the file unless the table holds it.
    pub(crate) fn filter(self: &Arc<Self>) -> Result<Held<PinnedFilter>> {
        self.held(&self.filter, Self::read_filter, PinnedFilter::size)
    }

    /// The layout of the table's filter (`strata inspect`), where it is held whole.
    pub(crate) fn whole_filter_layout(self: &Arc<Self>) -> Result<Option<&'static str>> {
        Ok(match &*self.filter()? {
            PinnedFilter::Whole(f) => Some(f.view().layout_name()),
            PinnedFilter::Partitions(_) => None,
        })
    }

    /// [`PinnedFilter::prefetch`] of the filter the table holds, if it holds one now.
    pub(crate) fn prefetch_filter(&self, user_key: &[u8]) {
        if let Some(f) = self.filter.load().as_deref() {
            f.prefetch(user_key);
        }
    }

    /// The root block of the index, read from the file unless the table holds it.
    pub(crate) fn index(self: &Arc<Self>) -> Result<Held<RootIndex>> {
        self.held(&self.index, Self::read_root, RootIndex::size)
    }

    /// Reads the filter and the root index into the table now, so that its first lookup
    /// finds them there (a table that flush or compaction has just written).
    pub(crate) fn warm(self: &Arc<Self>) -> Result<()> {
        self.filter()?;
        self.index()?;
        Ok(())
    }

    /// Bytes of filter and root index the table holds now.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.filter.load().as_deref().map_or(0, PinnedFilter::size)
            + self.index.load().as_deref().map_or(0, RootIndex::size)
    }

    /// What `slot` holds, read by `read` first if it holds nothing.
    pub(super) fn held<T>(
        self: &Arc<Self>,
        slot: &ArcSwapOption<T>,
        read: fn(&Self) -> Result<T>,
        size: fn(&T) -> usize,
    ) -> Result<Held<T>> {
        let held = slot.load();
        if held.is_some() {
            self.mark_used();
            return Ok(Held(held));
        }
        drop(held);
        self.load(slot, read, size)
    }

    #[cold]
    pub(super) fn load<T>(
        self: &Arc<Self>,
        slot: &ArcSwapOption<T>,
        read: fn(&Self) -> Result<T>,
        size: fn(&T) -> usize,
    ) -> Result<Held<T>> {
        let loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        // A racing lookup may have loaded it while this one waited.
        let held = slot.load();
        if held.is_some() {
            return Ok(Held(held));
        }
        drop(held);
        let value = Arc::new(read(self)?);
        self.used.store(true, atomic::Ordering::Relaxed);
        if let Some(budget) = &self.budget {
            budget.charge(size(&value));
        }
        slot.store(Some(value.clone()));
        drop(loading);
        if let Some(budget) = &self.budget {
            budget.admit(self);
        }
        Ok(Held(Guard::from_inner(Some(value))))
    }

    pub(super) fn read_filter(&self) -> Result<PinnedFilter> {
        let at = self.footer.filter;
        Ok(match self.footer.filter_kind {
            FilterKind::Whole => PinnedFilter::Whole(
                BloomFilter::new(self.read_raw(at)?).map_err(|e| e.at(&self.path, at.offset))?,
            ),
            FilterKind::Partitioned => {
                PinnedFilter::Partitions(RootIndex::new(self.read_index_root(at)?, &self.order))
            }
        })
    }

    pub(super) fn read_root(&self) -> Result<RootIndex> {
        Ok(RootIndex::new(
            self.read_index_root(self.footer.index)?,
            &self.order,
        ))
    }

    /// Reads the root block of the index, or the index of the filter's partitions, from the
    /// file; with search heads when the keys are in byte order, which the heads assume.
    pub(super) fn read_index_root(&self, at: BlockHandle) -> Result<Block> {
        let block = Block::new(self.read_raw(at)?);
        match self.order.is_bytewise() {
            true => block.and_then(Block::with_search_heads),
            false => block,
        }
        .map_err(|e| e.at(&self.path, at.offset))
    }

    /// Sets the bit that says the pinned blocks were used. Read first: once set, the bit
    /// stays set without a store to a shared line.
    pub(super) fn mark_used(&self) {
        if !self.used.load(atomic::Ordering::Relaxed) {
            self.used.store(true, atomic::Ordering::Relaxed);
        }
    }

    /// Clears the bit that says the pinned blocks were used since the last call; returns it.
    pub(super) fn take_used(&self) -> bool {
        self.used.swap(false, atomic::Ordering::Relaxed)
    }

    /// Lets the filter, the root index and the zstd dictionary go (reads holding them keep
    /// them until they end); returns the bytes they took.
    pub(super) fn unpin(&self) -> usize {
        self.filter.swap(None).map_or(0, |f| f.size())
            + self.index.swap(None).map_or(0, |r| r.size())
            + self.zstd_dictionary.swap(None).map_or(0, |d| d.sizeof())
    }

    pub(super) fn with_path(&self, e: Error, offset: u64) -> Error {
        match e {
            Error::Corruption { reason, .. } => Error::corruption(&self.path, offset, reason),
            other => other,
        }
    }

    /// False only when the table certainly holds no entry of `user_key` at or after `lookup`
    /// (an internal key of `user_key`): the answer of the whole filter, or of the partition
    /// that a seek for `lookup` lands in. A partition covers whole data blocks, and each user
    /// key is in the partition of every block that holds one of its entries, so the entry a
    /// lookup finds is always in the partition asked.
    pub(crate) fn may_contain(
        &self,
        filter: &PinnedFilter,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
    ) -> Result<bool> {
        let index = match filter {
            PinnedFilter::Whole(f) => return Ok(f.view().may_contain(user_key)),
            PinnedFilter::Partitions(index) => index,
        };
        let found = match index.settled(lookup) {
            Some(settled) => settled,
            None => self.seek_index(&index.block, self.footer.filter, lookup)?,
        };
        // Past the last partition: every key of the table is below `lookup`.
        let Some(handle) = found else {
            return Ok(false);
        };
        let probe = |block: &Block| self.probe_partition(block, handle, user_key);
        match self.cache.with(&(self.number.0, handle.offset), probe) {
            Some(answer) => answer,
            None => probe(&*self.load_block_as(handle, fill_cache, false, Priority::Meta)?),
        }
    }

    /// Asks the filter partition in `block` (read from `handle`) about `user_key`.
    pub(super) fn probe_partition(
        &self,
        block: &Block,
        handle: BlockHandle,
        user_key: &[u8],
    ) -> Result<bool> {
        let mut it = block.iter_ref(BlockOrder::Plain);
        it.seek_to_first()
            .map_err(|e| self.with_path(e, handle.offset))?;
        if !it.valid() {
            return Err(Error::corruption(
                &self.path,
                handle.offset,
                "filter partition without a filter",
            ));
        }
        let filter = FilterRef::new(it.value()).map_err(|e| e.at(&self.path, handle.offset))?;
        Ok(filter.may_contain(user_key))
    }

    /// The handles of a partitioned filter's partitions, in key order; none for a whole one.
    pub(super) fn filter_partition_handles(&self) -> Result<Vec<BlockHandle>> {
        match self.footer.filter_kind {
            FilterKind::Whole => Ok(Vec::new()),
            FilterKind::Partitioned => self.handles_in(self.footer.filter),
        }
    }

    /// The handle in every entry of the index block at `at` (of the index or of the filter's
    /// partitions), in order.
    pub(super) fn handles_in(&self, at: BlockHandle) -> Result<Vec<BlockHandle>> {
        let block = self.read_block(at, false)?;
        let mut it = block.iter(self.block_order());
        it.seek_to_first()
            .map_err(|e| self.with_path(e, at.offset))?;
        let mut out = Vec::new();
        while it.valid() {
            out.push(
                BlockHandle::decode_varint(it.value()).map_err(|e| e.at(&self.path, at.offset))?,
            );
            it.next().map_err(|e| self.with_path(e, at.offset))?;
        }
        Ok(out)
    }

    /// Descends the index, from its root `root`, to the handle of the data block that may
    /// hold `target`.
    pub(crate) fn find_data_block(
        &self,
        root: &RootIndex,
        target: &[u8],
        fill_cache: bool,
    ) -> Result<Option<BlockHandle>> {
        let mut handle = self.footer.index;
        for depth in 0..self.footer.index_depth {
            let found = if depth == 0 {
                match root.settled(target) {
                    Some(settled) => settled,
                    None => self.seek_index(&root.block, handle, target)?,
                }
            } else {
                let block = self.read_meta_block(handle, fill_cache)?;
                self.seek_index(&block, handle, target)?
            };
            match found {
                Some(h) => handle = h,
                None => return Ok(None),
            }
        }
        Ok(Some(handle))
    }

    /// The handle in the first entry at or after `target` of the index block `at` names.
    pub(super) fn seek_index(
        &self,
        block: &Block,
        at: BlockHandle,
        target: &[u8],
    ) -> Result<Option<BlockHandle>> {
        let mut it = block.iter_ref(self.block_order());
        it.seek(target).map_err(|e| self.with_path(e, at.offset))?;
        if !it.valid() {
            return Ok(None);
        }
        BlockHandle::decode_varint(it.value())
            .map(Some)
            .map_err(|e| e.at(&self.path, at.offset))
    }

    /// The first entry at or after `lookup` if it has the same user key (for the fuzz targets
    /// and tests; the engine's reads go through [`Table::get_reading`]).
    #[cfg(any(fuzzing, feature = "test-util", test))]
    pub(crate) fn get(
        self: &Arc<Self>,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
    ) -> Result<Option<TableEntry>> {
        self.get_reading(lookup, user_key, fill_cache, &mut false)
    }

    /// [`Table::get`], setting `read_data` when the lookup went as far as a data block (the
    /// filter passed the key and the index named a block): the cost that read-triggered
    /// compaction counts.
    pub(crate) fn get_reading(
        self: &Arc<Self>,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
        read_data: &mut bool,
    ) -> Result<Option<TableEntry>> {
        if !self.may_contain(&*self.filter()?, lookup, user_key, fill_cache)? {
            return Ok(None);
        }
        let Some(handle) = self.find_data_block(&*self.index()?, lookup, fill_cache)? else {
            self.false_positive();
            return Ok(None);
        };
        *read_data = true;
        // A cached block is searched where it lies, under the cache's read lock.
        let cached = self.cache.with(&(self.number.0, handle.offset), |block| {
            self.get_in_block(block, handle, lookup, user_key)
        });
        let found = match cached {
            Some(found) => found?,
            None => {
                let block = self.load_block(handle, fill_cache, false)?;
                self.get_in_block(&block, handle, lookup, user_key)?
            }
        };
        if found.is_none() {
            self.false_positive();
        }
        Ok(found)
    }

    /// [`Table::get`] within the data block `handle` names.
    pub(crate) fn get_in_block(
        &self,
        block: &Block,
        handle: BlockHandle,
        lookup: &[u8],
        user_key: &[u8],
    ) -> Result<Option<TableEntry>> {
        let mut it = block.iter_ref(self.block_order());
        it.seek(lookup)
            .map_err(|e| self.with_path(e, handle.offset))?;
        if !it.valid() {
            return Ok(None);
        }
        let parsed: ParsedKey<'_> = parse_internal_key(it.key()).ok_or_else(|| {
            Error::corruption(&self.path, handle.offset, "malformed internal key")
        })?;
        if parsed.user_key != user_key {
            return Ok(None);
        }
        Ok(Some(TableEntry {
            kind: parsed.kind,
            value: it.value().to_vec(),
            seq: parsed.seq,
        }))
    }

    /// Reads the properties block as (name, value) pairs.
    pub(crate) fn properties(&self) -> Result<Vec<(String, u64)>> {
        self.properties_of(&*self.read_block(self.footer.properties, false)?)
    }

    /// The (name, value) pairs of `block`, the properties block.
    pub(super) fn properties_of(&self, block: &Block) -> Result<Vec<(String, u64)>> {
        let mut it = block.iter_ref(BlockOrder::Plain);
        let mut out = Vec::new();
        it.seek_to_first()
            .map_err(|e| self.with_path(e, self.footer.properties.offset))?;
        while it.valid() {
            let v = crate::coding::Reader::new(it.value())
                .varint()
                .map_err(|e| e.at(&self.path, self.footer.properties.offset))?;
            out.push((String::from_utf8_lossy(it.key()).into_owned(), v));
            it.next()
                .map_err(|e| self.with_path(e, self.footer.properties.offset))?;
        }
        Ok(out)
    }

    pub(crate) fn footer(&self) -> Footer {
        self.footer
    }

    /// The handles of every data block, in key order, from the index.
    pub(crate) fn data_block_handles(&self) -> Result<Vec<BlockHandle>> {
        let mut level = vec![self.footer.index];
        for _ in 0..self.footer.index_depth {
            let mut next = Vec::new();
            for h in level {
                next.extend(self.handles_in(h)?);
            }
            level = next;
        }
        Ok(level)
    }

    /// Verifies the checksum of every block and the order of every key (for `check`);
    /// returns the number of entries.
    pub(crate) fn verify(self: &Arc<Self>) -> Result<u64> {
        self.warm()?;
        self.properties()?;
        self.range_tombstones()?;
        if self.footer.zstd_dictionary {
            self.zstd_dictionary()?;
        }
        for h in self.filter_partition_handles()? {
            self.probe_partition(&*self.read_block(h, false)?, h, b"")?;
        }
        let mut end = 0;
        for h in self.data_block_handles()? {
            self.check_gap(end, h.offset)?;
            self.read_block(h, false)?;
            end = h.offset + self.stored_len(h)? as u64;
        }
        let mut entries = 0u64;
        let mut it = self.iter(false);
        it.seek_to_first()?;
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            if parse_internal_key(it.key()).is_none() {
                return Err(Error::corruption(&self.path, 0, "malformed internal key"));
            }
            if let Some(l) = &last
                && self.order.internal(l, it.key()) != Ordering::Less
            {
                return Err(Error::corruption(&self.path, 0, "keys out of order"));
            }
            last = Some(it.key().to_vec());
            entries += 1;
            it.next()?;
        }
        Ok(entries)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.unpin());
        }
    }
}
