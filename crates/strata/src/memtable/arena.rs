//! The memtable's arena: nodes are carved out of chunks mapped from the operating system
//! and given back with the whole memtable.

use std::ptr;
use std::sync::Mutex;

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

/// Bump allocation of 8-byte-aligned, zeroed memory, all freed together when dropped.
pub(super) struct Arena {
    pub(super) inner: Mutex<ArenaInner>,
}

pub(super) struct ArenaInner {
    /// Every chunk; unmapped when the arena is dropped.
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
    pub(super) fn new() -> Self {
        Arena {
            inner: Mutex::new(ArenaInner {
                chunks: Vec::new(),
                next: ptr::null_mut(),
                left: 0,
                allocated: 0,
            }),
        }
    }

    /// `bytes` of zeroed memory aligned to 8, alive until the arena is dropped.
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
            // writes): its pages join the resident set as they are written. The chunks after
            // it fill up.
            let chunk = match a.chunks.is_empty() {
                true => Pages::new(chunk_words),
                false => Pages::resident(chunk_words),
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
