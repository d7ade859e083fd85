//! How a table reads a block: from the block cache, through its file's mapping, or with a
//! read of the file (alone, or batched by `parallel_read`), checked and decompressed.

use std::sync::Arc;

use super::block::{Block, BlockData};
use super::format::{
    BLOCK_TRAILER_BYTES, BlockHandle, Coding, Compression, ZstdDictionary, check_block,
    decompress_block, unwrap_block,
};
use super::mapped::{MappedPages, MappedTable};
use super::parallel_read::ReadRequest;
use super::reader::Table;
use crate::cache::Priority;
use crate::error::{Error, Result};
use crate::fs::{MappedBytes, RandomAccessFile};

/// A read for a batch, with the handle that keeps its descriptor open (see
/// [`crate::fs::RandomAccessFile::pinned`]).
pub(crate) type PreadOf = (ReadRequest, Option<Arc<dyn RandomAccessFile>>);

/// How far ahead of themselves reads in order without a mapping ask the kernel to read, and
/// how often they ask.
const READ_AHEAD_WINDOW: u64 = 256 * 1024;
const READ_AHEAD_STEP: u64 = 64 * 1024;

impl Table {
    /// Bytes a block occupies in the file: its contents and trailer.
    pub(super) fn stored_len(&self, handle: BlockHandle) -> Result<usize> {
        usize::try_from(handle.size)
            .ok()
            .and_then(|s| s.checked_add(BLOCK_TRAILER_BYTES))
            .ok_or_else(|| Error::corruption(&self.path, handle.offset, "block size overflows"))
    }

    /// Checks the bytes between a data block that ends at `end` and the next, at `next`: none,
    /// or the zeroes before a block kept within a page (`Options::block_align`), which no read
    /// but this one looks at.
    pub(super) fn check_gap(&self, end: u64, next: u64) -> Result<()> {
        if next == end {
            return Ok(());
        }
        let page = super::PAGE_BYTES as u64;
        let zeroes = next > end
            && next.is_multiple_of(page)
            && next - end < page
            && self
                .file
                .read_at(end, (next - end) as usize)
                .map_err(|e| Error::io("read", &self.path, e))?
                .iter()
                .all(|&b| b == 0);
        match zeroes {
            true => Ok(()),
            false => Err(Error::corruption(
                &self.path,
                end,
                "bytes between data blocks",
            )),
        }
    }

    pub(super) fn read_raw(&self, handle: BlockHandle) -> Result<Vec<u8>> {
        let len = self.stored_len(handle)?;
        self.unwrap_read(handle, self.file.read_at(handle.offset, len))
    }

    /// The block in `stored`, the answer of a read of `handle`'s bytes, checked.
    pub(super) fn unwrap_read(
        &self,
        handle: BlockHandle,
        stored: std::io::Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let mut stored = stored.map_err(|e| self.read_error(handle, e))?;
        let (body, kind) =
            check_block(&stored, true).map_err(|e| e.at(&self.path, handle.offset))?;
        if kind == Coding::Alone(Compression::None) {
            // The block is the bytes read, less the trailer: no copy.
            let n = body.len();
            stored.truncate(n);
            return Ok(stored);
        }
        self.decompress(body, kind, handle)
    }

    fn read_error(&self, handle: BlockHandle, e: std::io::Error) -> Error {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::corruption(
                &self.path,
                handle.offset,
                "block extends past the end of the file",
            ),
            _ => Error::io("read", &self.path, e),
        }
    }

    /// Uncompresses the checked body of the block at `handle`, with the table's dictionary
    /// if it was compressed with it.
    fn decompress(&self, body: &[u8], kind: Coding, handle: BlockHandle) -> Result<Vec<u8>> {
        let dictionary = match kind {
            Coding::ZstdDict => Some(self.zstd_dictionary()?),
            _ => None,
        };
        decompress_block(body, kind, dictionary.as_deref())
            .map_err(|e| e.at(&self.path, handle.offset))
    }

    /// The table's zstd dictionary, read from the file on first use and held like the
    /// filter and the index: counted against the metadata budget, and let go with them
    /// ([`Table::unpin`]). Its load makes room in the budget but puts the table in none of
    /// its queue (which needs the table's `Arc`): a lookup reads the table's index through
    /// the budget before any data block, and that read does. A table that a cursor reads
    /// with an index of its own (a compaction's input, or a scan whose table the budget let
    /// go meanwhile) keeps its dictionary counted until a lookup puts it in the queue, or it
    /// closes.
    pub(super) fn zstd_dictionary(&self) -> Result<Arc<ZstdDictionary>> {
        if let Some(d) = self.zstd_dictionary.load_full() {
            self.mark_used();
            return Ok(d);
        }
        // No lock: a filter or index block that claims to need the dictionary is read while
        // the table's `loading` lock is held, and would wait on itself. Two racing reads may
        // both read it; the one whose swap finds the slot empty keeps its own, counted first
        // so that an `unpin` racing the swap never gives back bytes not yet counted.
        let dictionary = Arc::new(self.read_zstd_dictionary()?);
        let bytes = dictionary.sizeof();
        if let Some(budget) = &self.budget {
            budget.charge(bytes);
        }
        let before = self
            .zstd_dictionary
            .compare_and_swap(&None::<Arc<ZstdDictionary>>, Some(dictionary.clone()));
        if let Some(kept) = before.as_ref() {
            if let Some(budget) = &self.budget {
                budget.release(bytes);
            }
            return Ok(kept.clone());
        }
        self.mark_used();
        if let Some(budget) = &self.budget {
            budget.make_room();
        }
        Ok(dictionary)
    }

    /// Reads the zstd dictionary from the file. The properties that name it and its own
    /// block are read as blocks that need no dictionary, so that a damaged or foreign file
    /// cannot lead this read back to itself.
    fn read_zstd_dictionary(&self) -> Result<ZstdDictionary> {
        let props = self.footer.properties;
        if !self.footer.zstd_dictionary {
            let why = "zstd block in a table without a dictionary";
            return Err(Error::corruption(&self.path, props.offset, why));
        }
        let block =
            Block::new(self.read_plain(props)?).map_err(|e| e.at(&self.path, props.offset))?;
        let at = self.named_block(
            &self.properties_of(&block)?,
            super::builder::prop::ZSTD_DICT_OFFSET,
            super::builder::prop::ZSTD_DICT_SIZE,
            "zstd dictionary",
        )?;
        // A dictionary in zstd's format has an id; bytes without one would be taken for a
        // dictionary of raw content, and decode every block into other bytes.
        ZstdDictionary::try_create(&self.read_plain(at)?)
            .filter(|d| d.get_dict_id().is_some())
            .ok_or_else(|| Error::corruption(&self.path, at.offset, "damaged zstd dictionary"))
    }

    /// A block that needs no dictionary, read with `pread` and checked.
    fn read_plain(&self, handle: BlockHandle) -> Result<Vec<u8>> {
        let len = self.stored_len(handle)?;
        let stored =
            (self.file.read_at(handle.offset, len)).map_err(|e| self.read_error(handle, e))?;
        unwrap_block(stored, None).map_err(|e| e.at(&self.path, handle.offset))
    }

    /// A block read in place from the mapping; checked, as every block read from the file,
    /// unless it passed its check since its pages were mapped (see `MappedTable::is_checked`).
    pub(super) fn read_mapped(
        &self,
        pages: &MappedPages,
        table: &MappedTable,
        handle: BlockHandle,
    ) -> Result<BlockData> {
        let past_end = || {
            Error::corruption(
                &self.path,
                handle.offset,
                "block extends past the end of the file",
            )
        };
        let start = usize::try_from(handle.offset).map_err(|_| past_end())?;
        let len = self.stored_len(handle)?;
        let stored = MappedBytes::new(table.map().clone(), start, len).ok_or_else(past_end)?;
        let verify = !table.is_checked(start, len);
        let (body, kind) =
            check_block(stored.bytes(), verify).map_err(|e| e.at(&self.path, handle.offset))?;
        if verify {
            table.mark_checked(start, len);
        }
        let data = match kind {
            Coding::Alone(Compression::None) => {
                let body_len = body.len();
                BlockData::Mapped(stored.truncated(body_len))
            }
            _ => BlockData::Owned(self.decompress(body, kind, handle)?),
        };
        pages.touch(table, start, len);
        Ok(data)
    }

    pub(crate) fn read_block(&self, handle: BlockHandle, fill_cache: bool) -> Result<Arc<Block>> {
        self.read_block_in(handle, fill_cache, false)
    }

    /// Reads a block, from the cache when it is there. A scan stepping to the next block
    /// (`in_order`) reads it through the mapping: one page fault maps the cached pages of 64
    /// KiB, the next fifteen blocks or so. A random read is cheaper with `pread` unless the
    /// page is mapped already, so it reads that way unless the table's mapping says its
    /// window is resident, or every open table fits in the mapping budget (then each window
    /// is faulted in once and stays). Reads that skip the cache (compactions,
    /// checks) read each block once and would only crowd the mapped pages out.
    ///
    /// A block read in place does not enter the block cache: the mapping holds it already,
    /// and a scan's blocks would only evict the blocks point reads come back to.
    pub(super) fn read_block_in(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        in_order: bool,
    ) -> Result<Arc<Block>> {
        if let Some(b) = self.cache.get(&(self.number.0, handle.offset)) {
            return Ok(b);
        }
        self.load_block(handle, fill_cache, in_order)
    }

    /// [`Table::read_block`] of a metadata block (an index block below the root, a filter
    /// partition), which the cache keeps before data blocks (see `cache.rs`).
    pub(crate) fn read_meta_block(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        if let Some(b) = self.cache.get(&(self.number.0, handle.offset)) {
            return Ok(b);
        }
        self.load_block_as(handle, fill_cache, false, Priority::Meta)
    }

    /// Reads a data block that is not in the cache, and caches it when `fill_cache` says so
    /// and it was not read in place.
    pub(super) fn load_block(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        in_order: bool,
    ) -> Result<Arc<Block>> {
        self.load_block_as(handle, fill_cache, in_order, Priority::Data)
    }

    /// [`Table::load_block`] of a block of `priority`.
    pub(super) fn load_block_as(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        in_order: bool,
        priority: Priority,
    ) -> Result<Arc<Block>> {
        // A random read takes the block in place too when its pages are mapped already:
        // then it costs no fault, and saves the system call, the copy and the allocation.
        let resident = |table: &MappedTable| {
            let start = usize::try_from(handle.offset).ok();
            let len = self.stored_len(handle).ok();
            start
                .zip(len)
                .is_some_and(|(start, len)| table.is_resident(start, len))
        };
        let (data, cache) = match &self.mapped {
            Some((pages, table))
                if fill_cache && (in_order || pages.holds_all() || resident(table)) =>
            {
                // A compressed block comes out of the mapping decompressed into a buffer of
                // its own: a random read caches that, as a block read with `pread` is cached,
                // so that the next lookup does not decompress it again.
                let data = self.read_mapped(pages, table, handle)?;
                let owned = matches!(data, BlockData::Owned(_));
                (data, owned && !in_order)
            }
            _ => {
                if in_order {
                    self.read_ahead(handle);
                }
                (BlockData::Owned(self.read_raw(handle)?), fill_cache)
            }
        };
        let block = Arc::new(Block::new(data).map_err(|e| e.at(&self.path, handle.offset))?);
        if cache {
            self.cache
                .insert_as((self.number.0, handle.offset), block.clone(), priority);
        }
        Ok(block)
    }

    /// Reads in order with `pread` (a compaction's, or a scan's past the mapping) ask the
    /// kernel for what comes after them, since the table's file is opened for random reads
    /// and the kernel reads no further ahead by itself: each read that crosses into a new
    /// 64 KiB step asks for its block and the 256 KiB after it, so a run of reads in order
    /// finds its pages loaded, and one that starts mid-file (after a seek) waits for at most
    /// a step's reads before its hint.
    fn read_ahead(&self, handle: BlockHandle) {
        let end = handle
            .offset
            .saturating_add(self.stored_len(handle).unwrap_or(0) as u64);
        let (first, last) = (
            handle.offset / READ_AHEAD_STEP,
            end.saturating_sub(1) / READ_AHEAD_STEP,
        );
        if handle.offset == 0 || last > first || handle.offset.is_multiple_of(READ_AHEAD_STEP) {
            self.file
                .will_need(handle.offset, (end - handle.offset) + READ_AHEAD_WINDOW);
        }
    }

    /// Whether the cache holds the block of `handle` (counted neither as a hit nor a miss:
    /// a caller that reads it in counts the read with [`Table::count_cache_misses`]).
    pub(crate) fn is_cached(&self, handle: BlockHandle) -> bool {
        self.cache.contains(&(self.number.0, handle.offset))
    }

    /// Counts `n` of the table's blocks read into the cache outside [`Table::read_block`]
    /// as misses of the cache (a later use of each counts its hit).
    pub(crate) fn count_cache_misses(&self, n: u64) {
        self.cache.count_misses(n);
    }

    /// Whether every block is read in place from the table's mapping, the mapping budget
    /// holding every open table: no read of this table waits for the device through `pread`.
    pub(crate) fn reads_in_place(&self) -> bool {
        self.mapped
            .as_ref()
            .is_some_and(|(pages, _)| pages.holds_all())
    }

    /// The block of `handle` if the cache holds it.
    pub(crate) fn cached_block(&self, handle: BlockHandle) -> Option<Arc<Block>> {
        self.cache.get(&(self.number.0, handle.offset))
    }

    /// [`Table::read_block`] of a block the caller found missing from the cache.
    pub(crate) fn read_uncached(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        self.load_block(handle, fill_cache, false)
    }

    /// The read that [`Table::read_uncached`] of `handle` would make with `pread`, for a
    /// batch to make it together with others ([`super::parallel_read`]): `None` when the
    /// block would be read in place from the mapping, or the file has no descriptor. The
    /// caller has found the block missing from the cache, and holds the handle that comes
    /// with the read (if any) until the read is done: it keeps the descriptor open.
    pub(crate) fn pread_of(&self, handle: BlockHandle, fill_cache: bool) -> Option<PreadOf> {
        if let Some((pages, table)) = &self.mapped
            && fill_cache
        {
            let start = usize::try_from(handle.offset).ok()?;
            let len = self.stored_len(handle).ok()?;
            if pages.holds_all() || table.is_resident(start, len) {
                return None;
            }
        }
        // A file the table cache may close is read through a handle that keeps it open;
        // taken last, so that a block read from the mapping opens no file.
        let keep = self.file.pinned();
        let fd = match &keep {
            Some(f) => f.raw_fd()?,
            None => self.file.raw_fd()?,
        };
        let read = ReadRequest {
            fd,
            offset: handle.offset,
            len: self.stored_len(handle).ok()?,
        };
        Some((read, keep))
    }

    /// The block of `handle` from the answer of its [`Table::pread_of`] read: checked,
    /// parsed and cached as [`Table::read_block`] would.
    pub(crate) fn block_from_read(
        &self,
        handle: BlockHandle,
        stored: std::io::Result<Vec<u8>>,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        let data = BlockData::Owned(self.unwrap_read(handle, stored)?);
        let block = Arc::new(Block::new(data).map_err(|e| e.at(&self.path, handle.offset))?);
        if fill_cache {
            self.cache
                .insert((self.number.0, handle.offset), block.clone());
        }
        Ok(block)
    }
}
