//! Sorted string tables: the immutable files of the tree. [`format`] has the file layout.

pub(crate) mod block;
mod block_io;
pub(crate) mod builder;
pub(crate) mod filter;
pub(crate) mod format;
mod heads;
pub(crate) mod mapped;
pub(crate) mod parallel_read;
pub(crate) mod pinned;
pub(crate) mod reader;
mod ribbon;
mod table_iter;
#[cfg(test)]
mod tests;

pub(crate) use builder::PAGE_BYTES;
pub use format::{Compression, FilterKind, IndexKind};
pub(crate) use table_iter::TableIter;

/// How tables are built.
#[derive(Debug, Clone)]
pub(crate) struct TableOptions {
    pub block_size: usize,
    pub restart_interval: usize,
    /// Bloom filter bits per key (fractional under [`crate::FilterPolicy::Monkey`]).
    pub bloom_bits_per_key: f64,
    pub filter_format: crate::FilterFormat,
    pub compression: Compression,
    pub index_kind: IndexKind,
    pub filter_kind: FilterKind,
    /// Data blocks stay within a page of [`PAGE_BYTES`] ([`crate::Options::block_align`], for
    /// uncompressed tables of page-sized blocks).
    pub align_blocks: bool,
    /// The most bytes of a zstd table's dictionary ([`crate::Options::zstd_dictionary_bytes`];
    /// 0: none).
    pub zstd_dictionary_bytes: usize,
    /// The order of the keys.
    pub order: crate::comparator::KeyOrder,
}
