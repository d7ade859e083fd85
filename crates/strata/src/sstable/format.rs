//! Framing of an SST file (the layout is specified in `docs/format.md`):
//!
//! ```text
//! data block 0 | trailer
//! ...
//! data block n | trailer
//! filter block | trailer          whole: Bloom filter over every user key of the file
//!                                 partitioned: the partitions, then their index block
//! index blocks | trailer each     flat: one block; B-tree: leaves, inner levels, root last
//! properties   | trailer
//! footer (FOOTER_BYTES)
//! ```
//!
//! A block trailer is `compression: u8 | masked_crc32c(u32 LE)` where the checksum covers the
//! stored (possibly compressed) block bytes and the compression byte.
//!
//! The footer is `filter handle | index root handle | properties handle` (each `offset: u64 LE,
//! size: u64 LE`), `index_kind: u8`, `index_depth: u8`, `filter_kind: u8` (version 2; zero
//! in version 1), a flags byte (bit 0: a range-deletion block, version 3; zero before),
//! `masked_crc32c(u32 LE)`, `format_version: u32 LE`,
//! `magic: u64 LE`. The checksum covers the 52 bytes before it and the version and magic
//! after it, so that a damaged version number reads as damage, and only an intact footer of
//! a newer version as unsupported. A file with a whole filter is written as version 1, which
//! every release reads; one with a partitioned filter as version 2, which a release that
//! would take its filter index for a Bloom filter refuses; one with range tombstones as
//! version 3, which a release that would not see its deletions refuses.

#![deny(clippy::indexing_slicing)]

use crate::coding::{
    Reader, checksum_ok, masked_crc, put_u32, put_u64, put_varint, u32_at, u64_at,
};
use crate::error::DecodeError;

/// "STRATAst" little-endian: the last eight bytes of every SST file.
pub(crate) const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"STRATAst");
/// The SST format versions this build reads and writes: 1, 2 for files whose filter is
/// partitioned, 3 for files with range tombstones. Bump when the layout changes and keep
/// reading the old ones.
const TABLE_FORMAT_VERSIONS: [u32; 3] = [1, 2, 3];
pub(crate) const FOOTER_BYTES: usize = 3 * 16 + 4 + 4 + 4 + 8;
pub(crate) const BLOCK_TRAILER_BYTES: usize = 5;

/// Where a block lives in a file; `size` excludes the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    pub(crate) fn encode_varint(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.offset);
        put_varint(dst, self.size);
    }

    pub(crate) fn decode_varint(src: &[u8]) -> Result<BlockHandle, DecodeError> {
        let mut r = Reader::new(src);
        let h = BlockHandle {
            offset: r.varint()?,
            size: r.varint()?,
        };
        if !r.is_empty() {
            return Err(DecodeError("trailing bytes after block handle"));
        }
        Ok(h)
    }
}

/// Per-block compression. Written to disk: discriminants are frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Compression {
    /// Blocks are stored as they are.
    #[default]
    None = 0,
    /// LZ4 block compression.
    Lz4 = 1,
    /// Zstandard at level 3.
    Zstd = 2,
}

impl Compression {
    pub(crate) fn from_u8(b: u8) -> Option<Compression> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// How the index of an SST is searched. Written to disk: discriminants are frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum IndexKind {
    /// One index block, binary-searched over its entries.
    #[default]
    Flat = 0,
    /// A static B-tree: index blocks of at most one block size each, searched from the root.
    BTree = 1,
}

impl IndexKind {
    pub(crate) fn from_u8(b: u8) -> Option<IndexKind> {
        match b {
            0 => Some(IndexKind::Flat),
            1 => Some(IndexKind::BTree),
            _ => None,
        }
    }
}

/// How the Bloom filter of an SST is stored. Written to disk: discriminants are frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum FilterKind {
    /// One filter over every key of the file, held whole by the open table.
    #[default]
    Whole = 0,
    /// A filter per run of data blocks (about one block size each), found through an index
    /// of the partitions: the open table holds only that index, and the partitions go
    /// through the block cache.
    Partitioned = 1,
}

impl FilterKind {
    pub(crate) fn from_u8(b: u8) -> Option<FilterKind> {
        match b {
            0 => Some(FilterKind::Whole),
            1 => Some(FilterKind::Partitioned),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    pub filter: BlockHandle,
    pub index: BlockHandle,
    pub properties: BlockHandle,
    pub index_kind: IndexKind,
    /// Number of index levels from the root to the data blocks (1 for a flat index).
    pub index_depth: u8,
    /// What `filter` points at: the whole filter, or the index of its partitions.
    pub filter_kind: FilterKind,
    /// Whether the file has a range-deletion block (named in its properties).
    pub range_deletions: bool,
}

impl Footer {
    /// The format version of a file with this footer: the oldest that can describe it.
    pub(crate) fn version(&self) -> u32 {
        match (self.range_deletions, self.filter_kind) {
            (true, _) => 3,
            (false, FilterKind::Whole) => 1,
            (false, FilterKind::Partitioned) => 2,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(FOOTER_BYTES);
        for h in [self.filter, self.index, self.properties] {
            put_u64(&mut v, h.offset);
            put_u64(&mut v, h.size);
        }
        v.push(self.index_kind as u8);
        v.push(self.index_depth);
        v.extend_from_slice(&[self.filter_kind as u8, u8::from(self.range_deletions)]);
        let mut tail = Vec::with_capacity(12);
        put_u32(&mut tail, self.version());
        put_u64(&mut tail, TABLE_MAGIC);
        let crc = masked_crc(&[&v, &tail]);
        put_u32(&mut v, crc);
        v.extend_from_slice(&tail);
        debug_assert_eq!(v.len(), FOOTER_BYTES);
        v
    }

    /// Decodes a footer. An unknown magic or version is reported apart from a damaged footer
    /// so that the caller can tell a foreign file from a broken one.
    pub(crate) fn decode(src: &[u8]) -> Result<Footer, FooterError> {
        if src.len() != FOOTER_BYTES {
            return Err(FooterError::Damaged(DecodeError(
                "footer has the wrong size",
            )));
        }
        if u64_at(src, FOOTER_BYTES - 8).map_err(FooterError::Damaged)? != TABLE_MAGIC {
            return Err(FooterError::Damaged(DecodeError(
                "bad magic number: not an SST",
            )));
        }
        let body = src
            .get(..52)
            .ok_or(FooterError::Damaged(DecodeError("short footer")))?;
        let tail = src
            .get(56..)
            .ok_or(FooterError::Damaged(DecodeError("short footer")))?;
        let stored = u32_at(src, 52).map_err(FooterError::Damaged)?;
        if !checksum_ok(masked_crc(&[body, tail]), stored) {
            return Err(FooterError::Damaged(DecodeError(
                "footer checksum mismatch",
            )));
        }
        // Checked after the checksum: a damaged version number is damage, not a newer file.
        let version = u32_at(src, FOOTER_BYTES - 12).map_err(FooterError::Damaged)?;
        if !TABLE_FORMAT_VERSIONS.contains(&version) {
            return Err(FooterError::Version(version));
        }
        let mut r = Reader::new(body);
        let mut handle = || -> Result<BlockHandle, DecodeError> {
            Ok(BlockHandle {
                offset: r.u64()?,
                size: r.u64()?,
            })
        };
        let (filter, index, properties) = (
            handle().map_err(FooterError::Damaged)?,
            handle().map_err(FooterError::Damaged)?,
            handle().map_err(FooterError::Damaged)?,
        );
        let kind = body.get(48).copied().unwrap_or(u8::MAX);
        let depth = body.get(49).copied().unwrap_or(0);
        let index_kind = IndexKind::from_u8(kind)
            .ok_or(FooterError::Damaged(DecodeError("unknown index kind")))?;
        if depth == 0 {
            return Err(FooterError::Damaged(DecodeError("index depth of zero")));
        }
        // Version 1 wrote the byte as zero, a whole filter.
        let filter_kind = FilterKind::from_u8(body.get(50).copied().unwrap_or(u8::MAX))
            .filter(|k| version >= 2 || *k == FilterKind::Whole)
            .ok_or(FooterError::Damaged(DecodeError("unknown filter kind")))?;
        // Zero before version 3.
        let range_deletions = match (body.get(51).copied(), version) {
            (Some(0), _) => false,
            (Some(1), 3) => true,
            _ => return Err(FooterError::Damaged(DecodeError("unknown footer flags"))),
        };
        Ok(Footer {
            filter,
            index,
            properties,
            index_kind,
            index_depth: depth,
            filter_kind,
            range_deletions,
        })
    }
}

#[derive(Debug)]
pub(crate) enum FooterError {
    Damaged(DecodeError),
    Version(u32),
}

/// Compresses `raw` if that saves at least an eighth; returns the stored bytes and their kind.
pub(crate) fn compress_block(raw: &[u8], compression: Compression) -> (Vec<u8>, Compression) {
    let packed = match compression {
        Compression::None => None,
        Compression::Lz4 => Some(lz4_flex::block::compress_prepend_size(raw)),
        Compression::Zstd => ZSTD_COMPRESSOR
            .try_with(|c| c.borrow_mut().as_mut().map(|c| c.compress(raw)))
            .ok()
            .flatten()
            // No context for this thread (being torn down, or out of memory): a one-off one.
            .unwrap_or_else(|| zstd::bulk::compress(raw, 3))
            .ok(),
    };
    match packed {
        Some(p) if p.len() < raw.len() - raw.len() / 8 => (p, compression),
        _ => (raw.to_vec(), Compression::None),
    }
}

/// The largest decompressed block accepted: a guard against a damaged size prefix asking for
/// an unbounded allocation.
const MAX_BLOCK_BYTES: usize = 256 * 1024 * 1024;

/// Reads a stored block's trailer, checking the checksum when `verify` (a block read before
/// and checked then, still in place, need not be); returns the stored body and how it is
/// compressed.
pub(crate) fn check_block(
    stored_with_trailer: &[u8],
    verify: bool,
) -> Result<(&[u8], Compression), DecodeError> {
    let n = stored_with_trailer
        .len()
        .checked_sub(BLOCK_TRAILER_BYTES)
        .ok_or(DecodeError("block shorter than its trailer"))?;
    let (body, trailer) = stored_with_trailer.split_at(n);
    let kind_byte = *trailer
        .first()
        .ok_or(DecodeError("missing block trailer"))?;
    let crc = u32_at(trailer, 1)?;
    if verify && !checksum_ok(masked_crc(&[body, &[kind_byte]]), crc) {
        return Err(DecodeError("block checksum mismatch"));
    }
    let kind = Compression::from_u8(kind_byte).ok_or(DecodeError("unknown block compression"))?;
    Ok((body, kind))
}

/// Uncompresses a checked block body that is stored compressed.
pub(crate) fn decompress_block(body: &[u8], kind: Compression) -> Result<Vec<u8>, DecodeError> {
    match kind {
        Compression::None => Ok(body.to_vec()),
        Compression::Lz4 => {
            let declared = u32_at(body, 0)? as usize;
            if declared > MAX_BLOCK_BYTES {
                return Err(DecodeError("lz4 block declares an oversized length"));
            }
            lz4_flex::block::decompress_size_prepended(body)
                .map_err(|_| DecodeError("lz4 block does not decompress"))
        }
        Compression::Zstd => {
            // The frame declares its size (Strata's writer always records it): allocate
            // that, not the bound, and reuse this thread's decompression context. Both
            // matter: a fresh context and a 256 MiB allocation per block made zstd reads a
            // tenth as fast as plain ones.
            let capacity = match zstd::zstd_safe::get_frame_content_size(body) {
                Ok(Some(n)) if n <= MAX_BLOCK_BYTES as u64 => n as usize,
                Ok(Some(_)) => return Err(DecodeError("zstd block declares an oversized length")),
                Ok(None) => MAX_BLOCK_BYTES,
                Err(_) => return Err(DecodeError("zstd block does not decompress")),
            };
            ZSTD_DECOMPRESSOR
                .try_with(|d| {
                    d.borrow_mut()
                        .as_mut()
                        .map(|d| d.decompress(body, capacity))
                })
                .ok()
                .flatten()
                // No context for this thread (being torn down, or out of memory): a one-off.
                .unwrap_or_else(|| zstd::bulk::decompress(body, capacity))
                .map_err(|_| DecodeError("zstd block does not decompress"))
        }
    }
}

thread_local! {
    /// Each thread's zstd contexts, made once: a context costs more to set up than a 4 KiB
    /// block costs to code.
    static ZSTD_COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        std::cell::RefCell::new(zstd::bulk::Compressor::new(3).ok());
    static ZSTD_DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        std::cell::RefCell::new(zstd::bulk::Decompressor::new().ok());
}

/// Checks a block's trailer and returns its uncompressed contents.
pub(crate) fn unwrap_block(mut stored_with_trailer: Vec<u8>) -> Result<Vec<u8>, DecodeError> {
    let (body, kind) = check_block(&stored_with_trailer, true)?;
    match kind {
        Compression::None => {
            // The block is the bytes read, less the trailer: no copy.
            let n = body.len();
            stored_with_trailer.truncate(n);
            Ok(stored_with_trailer)
        }
        _ => decompress_block(body, kind),
    }
}

/// Appends the trailer for stored block bytes.
pub(crate) fn block_trailer(stored: &[u8], kind: Compression) -> [u8; BLOCK_TRAILER_BYTES] {
    let crc = masked_crc(&[stored, &[kind as u8]]);
    let mut t = [0u8; BLOCK_TRAILER_BYTES];
    t[0] = kind as u8;
    t[1..].copy_from_slice(&crc.to_le_bytes());
    t
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trips_and_detects_damage() {
        let kinds = [FilterKind::Whole, FilterKind::Partitioned];
        for (filter_kind, range_deletions) in
            kinds.into_iter().flat_map(|k| [(k, false), (k, true)])
        {
            let f = Footer {
                filter: BlockHandle { offset: 1, size: 2 },
                index: BlockHandle { offset: 3, size: 4 },
                properties: BlockHandle { offset: 5, size: 6 },
                index_kind: IndexKind::BTree,
                index_depth: 3,
                filter_kind,
                range_deletions,
            };
            let enc = f.encode();
            assert_eq!(Footer::decode(&enc).unwrap(), f);
            for i in 0..FOOTER_BYTES {
                let mut bad = enc.clone();
                bad[i] ^= 0x10;
                assert!(Footer::decode(&bad).is_err(), "flip at {i} went unnoticed");
            }
        }
    }

    /// Re-seals a footer's checksum after its bytes were changed on purpose.
    fn reseal(enc: &mut [u8]) {
        let crc = masked_crc(&[&enc[..52], &enc[56..]]);
        enc[52..56].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn the_version_names_the_filter_kinds_it_may_hold() {
        let f = Footer {
            filter: BlockHandle::default(),
            index: BlockHandle::default(),
            properties: BlockHandle::default(),
            index_kind: IndexKind::Flat,
            index_depth: 1,
            filter_kind: FilterKind::Whole,
            range_deletions: false,
        };
        let whole = f.encode();
        assert_eq!(u32_at(&whole, 56).unwrap(), 1);
        // A version-1 footer claiming a partitioned filter is damaged, not partitioned.
        let mut claims = whole.clone();
        claims[50] = FilterKind::Partitioned as u8;
        reseal(&mut claims);
        assert!(matches!(
            Footer::decode(&claims),
            Err(FooterError::Damaged(_))
        ));
        // A version-1 footer claiming range deletions is damaged too.
        let mut claims = whole.clone();
        claims[51] = 1;
        reseal(&mut claims);
        assert!(matches!(
            Footer::decode(&claims),
            Err(FooterError::Damaged(_))
        ));
        // An intact footer of a version to come is unsupported, not damaged.
        let mut newer = whole;
        newer[56..60].copy_from_slice(&4u32.to_le_bytes());
        reseal(&mut newer);
        assert!(matches!(
            Footer::decode(&newer),
            Err(FooterError::Version(4))
        ));
    }

    #[test]
    fn blocks_round_trip_under_every_compression() {
        let raw: Vec<u8> = (0..4000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let (stored, kind) = compress_block(&raw, c);
            let mut with = stored.clone();
            with.extend_from_slice(&block_trailer(&stored, kind));
            assert_eq!(unwrap_block(with.clone()).unwrap(), raw);
            with[0] ^= 1;
            assert!(unwrap_block(with.clone()).is_err());
        }
    }
}
