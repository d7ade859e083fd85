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
//! in version 1), a flags byte (bit 0: a range-deletion block, version 3; bit 1: a zstd
//! dictionary, version 4; zero before),
//! `masked_crc32c(u32 LE)`, `format_version: u32 LE`,
//! `magic: u64 LE`. The checksum covers the 52 bytes before it and the version and magic
//! after it, so that a damaged version number reads as damage, and only an intact footer of
//! a newer version as unsupported. A file with a whole filter is written as version 1, which
//! every release reads; one with a partitioned filter as version 2, which a release that
//! would take its filter index for a Bloom filter refuses; one with range tombstones as
//! version 3, which a release that would not see its deletions refuses; one whose blocks
//! are compressed with a zstd dictionary as version 4.

#![deny(clippy::indexing_slicing)]

use crate::coding::{
    Reader, checksum_ok, masked_crc, put_u32, put_u64, put_varint, u32_at, u64_at,
};
use crate::error::DecodeError;

/// "STRATAst" little-endian: the last eight bytes of every SST file.
pub(crate) const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"STRATAst");
/// The SST format versions this build reads and writes: 1, 2 for files whose filter is
/// partitioned, 3 for files with range tombstones, 4 for files with a zstd dictionary.
/// Bump when the layout changes and keep reading the old ones.
const TABLE_FORMAT_VERSIONS: [u32; 4] = [1, 2, 3, 4];
pub(crate) const FOOTER_BYTES: usize = 3 * 16 + 4 + 4 + 4 + 8;
pub(crate) const BLOCK_TRAILER_BYTES: usize = 5;

/// Where a block lives in a file; `size` excludes the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    /// True when the block and its trailer end at or before `limit`, without overflow.
    pub(crate) fn ends_by(&self, limit: u64) -> bool {
        self.size
            .checked_add(BLOCK_TRAILER_BYTES as u64)
            .and_then(|len| self.offset.checked_add(len))
            .is_some_and(|end| end <= limit)
    }

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
    /// Whether the file has a zstd dictionary block (named in its properties), with which
    /// its blocks of kind [`ZSTD_DICT_KIND`] were compressed.
    pub zstd_dictionary: bool,
}

impl Footer {
    /// The format version of a file with this footer: the oldest that can describe it.
    pub(crate) fn version(&self) -> u32 {
        match (self.range_deletions, self.filter_kind) {
            _ if self.zstd_dictionary => 4,
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
        let flags = u8::from(self.range_deletions) | u8::from(self.zstd_dictionary) << 1;
        v.extend_from_slice(&[self.filter_kind as u8, flags]);
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
        // Bit 0 from version 3, bit 1 from version 4; zero before.
        let flags = body.get(51).copied().unwrap_or(u8::MAX);
        let known = match version {
            3 => 0b01,
            4 => 0b11,
            _ => 0,
        };
        if flags & !known != 0 {
            return Err(FooterError::Damaged(DecodeError("unknown footer flags")));
        }
        Ok(Footer {
            filter,
            index,
            properties,
            index_kind,
            index_depth: depth,
            filter_kind,
            range_deletions: flags & 1 != 0,
            zstd_dictionary: flags & 2 != 0,
        })
    }
}

#[derive(Debug)]
pub(crate) enum FooterError {
    Damaged(DecodeError),
    Version(u32),
}

/// A table's zstd dictionary, prepared for decompression.
pub(crate) type ZstdDictionary = zstd::zstd_safe::DDict<'static>;

/// How a stored block is coded, as its trailer's kind byte says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// Stored as it is, or compressed on its own.
    Alone(Compression),
    /// Compressed with zstd and its table's dictionary (format version 4): how a zstd table
    /// stores its data blocks once the dictionary is made, not an option of its own.
    ZstdDict,
}

/// The kind byte of [`Coding::ZstdDict`]: the one after [`Compression`]'s.
const ZSTD_DICT_KIND: u8 = 3;

impl Coding {
    pub(crate) fn byte(self) -> u8 {
        match self {
            Coding::Alone(c) => c as u8,
            Coding::ZstdDict => ZSTD_DICT_KIND,
        }
    }

    fn from_u8(b: u8) -> Option<Coding> {
        match b {
            ZSTD_DICT_KIND => Some(Coding::ZstdDict),
            _ => Compression::from_u8(b).map(Coding::Alone),
        }
    }
}

/// Compresses `raw` if that saves at least an eighth; returns the stored bytes and their kind.
pub(crate) fn compress_block(raw: &[u8], compression: Compression) -> (Vec<u8>, Coding) {
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
    keep_if_smaller(raw, packed, Coding::Alone(compression))
}

/// Compresses `raw` with a table's dictionary (loaded into `compressor`), on the same terms.
pub(crate) fn compress_block_with(
    raw: &[u8],
    compressor: &mut zstd::bulk::Compressor<'static>,
) -> (Vec<u8>, Coding) {
    keep_if_smaller(raw, compressor.compress(raw).ok(), Coding::ZstdDict)
}

fn keep_if_smaller(raw: &[u8], packed: Option<Vec<u8>>, coding: Coding) -> (Vec<u8>, Coding) {
    match packed {
        Some(p) if p.len() < raw.len() - raw.len() / 8 => (p, coding),
        _ => (raw.to_vec(), Coding::Alone(Compression::None)),
    }
}

/// A compressor of zstd blocks with `dictionary`, or `None` when zstd refuses it.
pub(crate) fn dictionary_compressor(dictionary: &[u8]) -> Option<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::with_dictionary(3, dictionary).ok()?;
    // The table names its one dictionary: no frame need carry its id.
    c.set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(false))
        .ok()?;
    Some(c)
}

/// The largest decompressed block accepted: a guard against a damaged size prefix asking for
/// an unbounded allocation.
const MAX_BLOCK_BYTES: usize = 256 * 1024 * 1024;

/// Reads a stored block's trailer, checking the checksum when `verify` (a block read before
/// and checked then, still in place, need not be); returns the stored body and how it is
/// coded.
pub(crate) fn check_block(
    stored_with_trailer: &[u8],
    verify: bool,
) -> Result<(&[u8], Coding), DecodeError> {
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
    let kind = Coding::from_u8(kind_byte).ok_or(DecodeError("unknown block compression"))?;
    Ok((body, kind))
}

/// Uncompresses a checked block body that is stored compressed; `dictionary` is its table's,
/// which a block of [`Coding::ZstdDict`] needs.
pub(crate) fn decompress_block(
    body: &[u8],
    kind: Coding,
    dictionary: Option<&ZstdDictionary>,
) -> Result<Vec<u8>, DecodeError> {
    match kind {
        Coding::Alone(Compression::None) => Ok(body.to_vec()),
        Coding::Alone(Compression::Lz4) => {
            let declared = u32_at(body, 0)? as usize;
            if declared > MAX_BLOCK_BYTES {
                return Err(DecodeError("lz4 block declares an oversized length"));
            }
            lz4_flex::block::decompress_size_prepended(body)
                .map_err(|_| DecodeError("lz4 block does not decompress"))
        }
        Coding::Alone(Compression::Zstd) => zstd_decompress(body, None),
        Coding::ZstdDict => match dictionary {
            Some(d) => zstd_decompress(body, Some(d)),
            None => Err(DecodeError("zstd block without its table's dictionary")),
        },
    }
}

/// Decompresses a zstd frame, with `dictionary` if given, in this thread's context. The
/// frame declares its size (Strata's writer always records it): allocate that, not the
/// bound, and reuse the context. Both matter: a fresh context and a 256 MiB allocation per
/// block made zstd reads a tenth as fast as plain ones.
fn zstd_decompress(
    body: &[u8],
    dictionary: Option<&ZstdDictionary>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(zstd_frame_size(body)?);
    let decompress = |d: &mut zstd::zstd_safe::DCtx<'static>, out: &mut Vec<u8>| match dictionary {
        Some(dictionary) => d.decompress_using_ddict(out, body, dictionary),
        None => d.decompress(out, body),
    };
    let done = ZSTD_DECOMPRESSOR
        .try_with(|d| d.borrow_mut().as_mut().map(|d| decompress(d, &mut out)))
        .ok()
        .flatten()
        // No context for this thread (being torn down, or out of memory): a one-off one.
        .or_else(|| zstd::zstd_safe::DCtx::try_create().map(|mut d| decompress(&mut d, &mut out)));
    match done {
        Some(Ok(_)) => Ok(out),
        _ => Err(DecodeError("zstd block does not decompress")),
    }
}

/// The size a zstd frame declares, checked against [`MAX_BLOCK_BYTES`] (which stands in for
/// a size not declared; Strata's writer declares every one).
fn zstd_frame_size(body: &[u8]) -> Result<usize, DecodeError> {
    match zstd::zstd_safe::get_frame_content_size(body) {
        Ok(Some(n)) if n <= MAX_BLOCK_BYTES as u64 => Ok(n as usize),
        Ok(Some(_)) => Err(DecodeError("zstd block declares an oversized length")),
        Ok(None) => Ok(MAX_BLOCK_BYTES),
        Err(_) => Err(DecodeError("zstd block does not decompress")),
    }
}

thread_local! {
    /// Each thread's zstd contexts, made once: a context costs more to set up than a 4 KiB
    /// block costs to code.
    static ZSTD_COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        std::cell::RefCell::new(zstd::bulk::Compressor::new(3).ok());
    static ZSTD_DECOMPRESSOR: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::try_create());
}

/// Checks a block's trailer and returns its uncompressed contents (a block compressed with a
/// dictionary needs the table's: see `Table::unwrap_read`).
pub(crate) fn unwrap_block(
    mut stored_with_trailer: Vec<u8>,
    dictionary: Option<&ZstdDictionary>,
) -> Result<Vec<u8>, DecodeError> {
    let (body, kind) = check_block(&stored_with_trailer, true)?;
    match kind {
        Coding::Alone(Compression::None) => {
            // The block is the bytes read, less the trailer: no copy.
            let n = body.len();
            stored_with_trailer.truncate(n);
            Ok(stored_with_trailer)
        }
        _ => decompress_block(body, kind, dictionary),
    }
}

/// Appends the trailer for stored block bytes.
pub(crate) fn block_trailer(stored: &[u8], kind: Coding) -> [u8; BLOCK_TRAILER_BYTES] {
    let crc = masked_crc(&[stored, &[kind.byte()]]);
    let mut t = [0u8; BLOCK_TRAILER_BYTES];
    t[0] = kind.byte();
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
        let flags = [(false, false), (true, false), (false, true), (true, true)];
        for (filter_kind, (range_deletions, zstd_dictionary)) in
            kinds.into_iter().flat_map(|k| flags.map(|f| (k, f)))
        {
            let f = Footer {
                filter: BlockHandle { offset: 1, size: 2 },
                index: BlockHandle { offset: 3, size: 4 },
                properties: BlockHandle { offset: 5, size: 6 },
                index_kind: IndexKind::BTree,
                index_depth: 3,
                filter_kind,
                range_deletions,
                zstd_dictionary,
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
            zstd_dictionary: false,
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
        // A version-3 footer claiming a zstd dictionary is damaged; version 4 names one.
        let mut claims = whole.clone();
        claims[56..60].copy_from_slice(&3u32.to_le_bytes());
        claims[51] = 0b11;
        reseal(&mut claims);
        assert!(matches!(
            Footer::decode(&claims),
            Err(FooterError::Damaged(_))
        ));
        let dictionary = Footer {
            zstd_dictionary: true,
            ..f
        };
        let mut v4 = dictionary.encode();
        assert_eq!(u32_at(&v4, 56).unwrap(), 4);
        // Version 4 knows two flags, not a third.
        v4[51] = 0b111;
        reseal(&mut v4);
        assert!(matches!(Footer::decode(&v4), Err(FooterError::Damaged(_))));
        // An intact footer of a version to come is unsupported, not damaged.
        let mut newer = whole;
        newer[56..60].copy_from_slice(&5u32.to_le_bytes());
        reseal(&mut newer);
        assert!(matches!(
            Footer::decode(&newer),
            Err(FooterError::Version(5))
        ));
    }

    #[test]
    fn blocks_round_trip_under_every_compression() {
        let raw: Vec<u8> = (0..4000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let (stored, kind) = compress_block(&raw, c);
            let mut with = stored.clone();
            with.extend_from_slice(&block_trailer(&stored, kind));
            assert_eq!(unwrap_block(with.clone(), None).unwrap(), raw);
            with[0] ^= 1;
            assert!(unwrap_block(with.clone(), None).is_err());
        }
    }

    #[test]
    fn a_block_compressed_with_a_dictionary_needs_that_dictionary() {
        let samples: Vec<Vec<u8>> = (0..64u32)
            .map(|s| {
                (0..4000u32)
                    .flat_map(|i| ((i * 7 + s) % 61).to_le_bytes())
                    .collect()
            })
            .collect();
        let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
        let dictionary = zstd::dict::from_continuous(&samples.concat(), &sizes, 4096).unwrap();
        let mut compressor = dictionary_compressor(&dictionary).unwrap();
        let raw: Vec<u8> = (0..4000u32)
            .flat_map(|i| ((i * 7 + 99) % 61).to_le_bytes())
            .collect();
        let (stored, kind) = compress_block_with(&raw, &mut compressor);
        assert_eq!(kind, Coding::ZstdDict);
        let mut with = stored.clone();
        with.extend_from_slice(&block_trailer(&stored, kind));
        let prepared = ZstdDictionary::try_create(&dictionary).unwrap();
        assert_eq!(unwrap_block(with.clone(), Some(&prepared)).unwrap(), raw);
        assert!(unwrap_block(with.clone(), None).is_err());
        // Read as a block compressed alone, it does not decompress.
        let mut alone = stored.clone();
        alone.extend_from_slice(&block_trailer(&stored, Coding::Alone(Compression::Zstd)));
        assert!(unwrap_block(alone, Some(&prepared)).is_err());
    }
}
