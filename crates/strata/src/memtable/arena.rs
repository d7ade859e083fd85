//! The memtable's arena: nodes are carved out of chunks mapped from the operating system
//! and given back with the whole memtable.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mutex::lock;

/// Bytes per arena chunk; a node larger than a quarter of this gets a chunk of its own.
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// Zeroed words taken straight from the operating system and given back to it when dropped.
///
/// A memtable's memory is freed all at once, tens of megabytes, after its flush. Taken from
/// the allocator in chunks of a megabyte, it stayed in the process: after the flush of a
/// 50 MiB memtable the resident set did not shrink at all (`tests/memory.rs`), and the
/// next memtables were laid out beside what the heap kept. A mapping of its own leaves the
/// resident set when unmapped, and pages of it never written never join it (unless it is
/// made [`Pages::resident`]).
pub(super) struct Pages {
    pub(super) ptr: ptr::NonNull<u64>,
    pub(super) layout: std::alloc::Layout,
}

// SAFETY: `Pages` owns its memory like a `Box<[u64]>`; sharing it is up to its users.
unsafe impl Send for Pages {}

impl Pages {
    /// `words` zeroed words (at least one), each page made resident on its first write. Like
    /// a `Vec`, panics on a size past `isize::MAX` bytes (entries and buckets are bounded far
    /// below) and aborts when memory runs out.
    pub(super) fn new(words: usize) -> Pages {
        Self::mapped(words, 0)
    }

    /// [`Pages::new`] with every page resident from the start: memory that will be written
    /// through from end to end, as an arena chunk after a memtable's first is, costs one call
    /// into the kernel instead of a page fault per page.
    pub(super) fn resident(words: usize) -> Pages {
        #[cfg(target_os = "linux")]
        let flags = libc::MAP_POPULATE;
        #[cfg(not(target_os = "linux"))]
        let flags = 0;
        Self::mapped(words, flags)
    }

    fn mapped(
        words: usize,
        #[cfg_attr(not(unix), allow(unused_variables))] extra_flags: i32,
    ) -> Pages {
        let Ok(layout) = std::alloc::Layout::array::<u64>(words.max(1)) else {
            panic!("memtable allocation of {words} words overflows");
        };
        #[cfg(unix)]
        let p = {
            // SAFETY: a new private anonymous mapping, unmapped once, in drop.
            let p = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                ptr::null_mut()
            } else {
                p.cast::<u64>()
            }
        };
        #[cfg(not(unix))]
        // SAFETY: the layout is not zero-sized.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
        match ptr::NonNull::new(p) {
            Some(ptr) => Pages { ptr, layout },
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    pub(super) fn as_ptr(&self) -> *mut u64 {
        self.ptr.as_ptr()
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: the mapping made in `mapped`, with its length; unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.layout.size());
        }
        #[cfg(not(unix))]
        // SAFETY: allocated in `mapped` with this layout; freed once.
        unsafe {
            std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout);
        }
    }
}

/// Chunks of flushed memtables kept for the next memtables: up to a write buffer's worth,
/// and one hash bucket table.
///
/// Under a steady stream of writes a memtable fills while the one before it is flushed.
/// Mapping its chunks fresh (the kernel zeroing and setting up each page) took 11% of a
/// batch writer's time, and unmapping the flushed one's more (from Python, batches of 100).
/// A flushed memtable whose family is still taking writes gives its chunks here instead (see
/// [`Arena::recycle_on_drop`]). The database empties the pool when a flush finds no
/// writes after it, and when the pool has gone unused for [`ChunkPool::IDLE`], so that
/// the memory of a database whose writes have stopped still leaves the process.
pub(crate) struct ChunkPool {
    chunks: Mutex<Vec<Pages>>,
    /// A flushed memtable's hash buckets, with its family's id: a family that takes writes
    /// reuses its own table. Mapped fresh, each page of a table faults twice (a read maps
    /// the shared zero page, the first store then copies it), and the second fault stops
    /// the other threads' processors to flush their address translations.
    buckets: Mutex<Option<(u32, Pages)>>,
    /// Chunks kept at most.
    limit: usize,
    /// When a chunk was last taken or given.
    used: Mutex<Instant>,
}

impl ChunkPool {
    /// How long the pool may go unused before [`ChunkPool::release_if_idle`] empties it.
    pub(crate) const IDLE: Duration = Duration::from_secs(1);

    /// A pool that keeps at most `bytes` of chunks (rounded down to whole chunks): the
    /// database's write buffer size, whatever its families' own.
    pub(crate) fn new(bytes: usize) -> Self {
        ChunkPool {
            chunks: Mutex::new(Vec::new()),
            buckets: Mutex::new(None),
            limit: bytes / CHUNK_BYTES,
            used: Mutex::new(Instant::now()),
        }
    }

    /// `family`'s bucket table of `words` words, zeroed, if the pool keeps it.
    fn take_buckets(&self, family: u32, words: usize) -> Option<Pages> {
        let mut kept = lock(&self.buckets);
        match kept.as_ref() {
            Some((f, pages)) if *f == family && pages.layout.size() == words * 8 => {}
            _ => return None,
        }
        let (_, pages) = kept.take()?;
        drop(kept);
        // SAFETY: the mapping holds `words` words, and nothing else refers to it.
        unsafe { ptr::write_bytes(pages.as_ptr(), 0, words) };
        Some(pages)
    }

    fn take(&self) -> Option<Pages> {
        let chunk = lock(&self.chunks).pop();
        if chunk.is_some() {
            *lock(&self.used) = Instant::now();
        }
        chunk
    }

    /// Keeps what fits of `chunks`; the rest are unmapped.
    fn give(&self, chunks: Vec<Pages>) {
        *lock(&self.used) = Instant::now();
        let mut kept = lock(&self.chunks);
        let mut rest = Vec::new();
        for chunk in chunks {
            match kept.len() < self.limit {
                true => kept.push(chunk),
                false => rest.push(chunk),
            }
        }
        drop(kept);
        drop(rest);
    }

    /// Unmaps every chunk and bucket table kept.
    pub(crate) fn clear(&self) {
        let chunks = std::mem::take(&mut *lock(&self.chunks));
        drop(chunks);
        let buckets = lock(&self.buckets).take();
        drop(buckets);
    }

    /// Empties the pool if no chunk was taken or given for [`ChunkPool::IDLE`]: the writes
    /// have stopped, or come too slowly to need it.
    pub(crate) fn release_if_idle(&self) {
        if self.bytes() > 0 && lock(&self.used).elapsed() >= Self::IDLE {
            self.clear();
        }
    }

    /// Bytes of the bucket table kept.
    #[cfg(test)]
    pub(super) fn bucket_bytes(&self) -> usize {
        lock(&self.buckets)
            .as_ref()
            .map_or(0, |(_, b)| b.layout.size())
    }

    /// Bytes of the chunks and bucket table kept.
    pub(crate) fn bytes(&self) -> usize {
        let buckets = lock(&self.buckets)
            .as_ref()
            .map_or(0, |(_, b)| b.layout.size());
        lock(&self.chunks).len() * CHUNK_BYTES + buckets
    }
}

/// Where a memtable's arena takes chunks from first and, once its memory is marked for
/// reuse, gives them back: the database's pool, and the memtable's family.
#[derive(Clone)]
pub(crate) struct Recycling {
    pub(crate) pool: Arc<ChunkPool>,
    pub(crate) family: u32,
}

/// Bump allocation of 8-byte-aligned memory, all freed together when dropped. Memory from a
/// recycled chunk holds an older memtable's bytes: callers write all they read.
pub(super) struct Arena {
    pub(super) inner: Mutex<ArenaInner>,
    /// Where chunks come from first and, when `recycle` is set, go back to.
    pool: Option<Recycling>,
    recycle: AtomicBool,
}

pub(super) struct ArenaInner {
    /// Every chunk; unmapped (or recycled) when the arena is dropped.
    pub(super) chunks: Vec<Pages>,
    /// The next free word of the current chunk, and how many words remain there.
    pub(super) next: *mut u64,
    pub(super) left: usize,
    /// Bytes of all chunks.
    pub(super) allocated: usize,
}

// SAFETY: the raw pointer points into an owned chunk, touched only under the mutex.
unsafe impl Send for ArenaInner {}

impl Arena {
    pub(super) fn new(pool: Option<Recycling>) -> Self {
        Arena {
            inner: Mutex::new(ArenaInner {
                chunks: Vec::new(),
                next: ptr::null_mut(),
                left: 0,
                allocated: 0,
            }),
            pool,
            recycle: AtomicBool::new(false),
        }
    }

    /// Gives the chunks to the pool when the arena is dropped, instead of unmapping them.
    pub(super) fn recycle_on_drop(&self) {
        self.recycle.store(true, Ordering::Relaxed);
    }

    /// The pool, when the memtable's memory goes back to it.
    fn recycling(&self) -> Option<&Recycling> {
        self.pool
            .as_ref()
            .filter(|_| self.recycle.load(Ordering::Relaxed))
    }

    /// A bucket table of `words` words: the family's from the pool, zeroed, or a fresh one.
    pub(super) fn buckets(&self, words: usize) -> Pages {
        let recycled = self
            .pool
            .as_ref()
            .and_then(|r| r.pool.take_buckets(r.family, words));
        recycled.unwrap_or_else(|| Pages::new(words))
    }

    /// Takes back the memtable's bucket table, as the arena's chunks, when it is dropped.
    pub(super) fn release_buckets(&self, buckets: Pages) {
        match self.recycling() {
            // One table is kept; another family's, or one of an older size, is unmapped.
            Some(r) => drop(lock(&r.pool.buckets).replace((r.family, buckets))),
            None => drop(buckets),
        }
    }

    /// `bytes` of memory aligned to 8, alive until the arena is dropped.
    pub(super) fn alloc(&self, bytes: usize) -> *mut u8 {
        let words = bytes.div_ceil(8);
        let mut a = lock(&self.inner);
        if words > a.left {
            let chunk_words = if words * 8 > CHUNK_BYTES / 4 {
                words
            } else {
                CHUNK_BYTES / 8
            };
            // A memtable's first chunk may hold a few nodes only (a family that takes few
            // writes): it is mapped fresh, and its pages join the resident set as they are
            // written. The chunks after it fill up: they come from the pool (written
            // through by an earlier memtable, most of them) or are made resident at once.
            let recycled = match chunk_words == CHUNK_BYTES / 8 && !a.chunks.is_empty() {
                true => self.pool.as_ref().and_then(|r| r.pool.take()),
                false => None,
            };
            let chunk = match recycled {
                Some(chunk) => chunk,
                None if a.chunks.is_empty() => Pages::new(chunk_words),
                None => Pages::resident(chunk_words),
            };
            let start = chunk.as_ptr();
            a.chunks.push(chunk);
            a.allocated += chunk_words * 8;
            if chunk_words == words {
                // A chunk of its own; the current chunk keeps serving small nodes.
                return start.cast();
            }
            a.next = start;
            a.left = chunk_words;
        }
        let p = a.next;
        // SAFETY: `words <= left`, so the result stays within (or one past) the chunk.
        a.next = unsafe { p.add(words) };
        a.left -= words;
        p.cast()
    }

    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        lock(&self.inner).allocated
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let Some(Recycling { pool, .. }) = self.recycling() else {
            return;
        };
        let chunks = std::mem::take(&mut lock(&self.inner).chunks);
        // Chunks of a node of their own have other sizes; they are unmapped.
        let (standard, other): (Vec<Pages>, Vec<Pages>) = chunks
            .into_iter()
            .partition(|c| c.layout.size() == CHUNK_BYTES);
        pool.give(standard);
        drop(other);
    }
}
