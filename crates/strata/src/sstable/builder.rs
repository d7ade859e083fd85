//! Writes an SST file (layout in [`super::format`]).

use std::path::PathBuf;

use super::TableOptions;
use super::block::BlockBuilder;
use super::filter::FilterBuilder;
use super::format::{
    BLOCK_TRAILER_BYTES, BlockHandle, Coding, Compression, FilterKind, Footer, IndexKind,
    block_trailer, compress_block, compress_block_with, dictionary_compressor,
};
use crate::error::{Error, Result};
use crate::fs::WritableFile;
use crate::key::{SeqNo, ValueKind, internal_key, parse_internal_key, user_key};
use crate::range_del::RangeTombstone;

/// Names of the properties block entries. Written to disk: never renamed.
pub(crate) mod prop {
    pub const ENTRIES: &str = "strata.entries";
    pub const DELETIONS: &str = "strata.deletions";
    pub const RAW_KEY_BYTES: &str = "strata.raw-key-bytes";
    pub const RAW_VALUE_BYTES: &str = "strata.raw-value-bytes";
    pub const DATA_BLOCKS: &str = "strata.data-blocks";
    pub const DATA_BYTES: &str = "strata.data-bytes";
    pub const INDEX_BYTES: &str = "strata.index-bytes";
    pub const FILTER_BYTES: &str = "strata.filter-bytes";
    pub const COMPRESSION: &str = "strata.compression";
    pub const RANGE_DELETIONS: &str = "strata.range-deletions";
    pub const RANGE_DEL_OFFSET: &str = "strata.range-del-offset";
    pub const RANGE_DEL_SIZE: &str = "strata.range-del-size";
    pub const LARGEST_SEQ: &str = "strata.largest-seq";
    pub const ZSTD_DICT_OFFSET: &str = "strata.zstd-dict-offset";
    pub const ZSTD_DICT_SIZE: &str = "strata.zstd-dict-size";
}

/// The page that aligned data blocks stay within ([`TableOptions::align_blocks`]).
pub(crate) const PAGE_BYTES: usize = 4096;

/// The most an entry adds to a block besides its key and value: three length varints and a
/// restart point.
const ENTRY_OVERHEAD_BYTES: usize = 3 * 5 + 4;

/// Uncompressed data-block bytes (and at least [`DICTIONARY_SAMPLE_BLOCKS`] blocks) a zstd
/// table trains its dictionary on ([`TableOptions::zstd_dictionary_bytes`]). The blocks
/// before the one that completes the samples are compressed on their own; that block and
/// every later one with the dictionary.
const DICTIONARY_SAMPLE_BYTES: usize = 256 * 1024;
const DICTIONARY_SAMPLE_BLOCKS: usize = 16;
/// The most bytes one block gives the samples (its first ones): a table of large values,
/// whose blocks are each one value, would otherwise keep its first sixteen values whole and
/// train on all of them, megabytes of memory and training time for each table.
const DICTIONARY_SAMPLE_PER_BLOCK: usize = DICTIONARY_SAMPLE_BYTES / DICTIONARY_SAMPLE_BLOCKS;

/// A zstd table's dictionary: made from the table's first data blocks, stored in the table,
/// and used for the blocks after them. Small blocks compressed alone each carry (and each
/// read decodes) their own entropy tables; with a dictionary they take the dictionary's, and
/// share its strings too.
enum Dictionary {
    /// No dictionary: another compression, the option off, or a training that failed.
    Off,
    /// Raw data blocks, one after the other, and their lengths.
    Sampling { samples: Vec<u8>, sizes: Vec<usize> },
    /// The dictionary, a compressor with it loaded, and whether a block was compressed with
    /// it (a table whose blocks all went out alone or stored needs none).
    Made {
        bytes: Vec<u8>,
        compressor: Box<zstd::bulk::Compressor<'static>>,
        used: bool,
    },
}

impl Dictionary {
    fn new(opts: &TableOptions) -> Dictionary {
        if opts.compression != Compression::Zstd || opts.zstd_dictionary_bytes == 0 {
            return Dictionary::Off;
        }
        Dictionary::Sampling {
            samples: Vec::new(),
            sizes: Vec::new(),
        }
    }

    /// Counts `raw` among the samples, and trains the dictionary once there are enough.
    fn sample(&mut self, raw: &[u8], max_bytes: usize) {
        let Dictionary::Sampling { samples, sizes } = self else {
            return;
        };
        let sample = raw.get(..DICTIONARY_SAMPLE_PER_BLOCK).unwrap_or(raw);
        samples.extend_from_slice(sample);
        sizes.push(sample.len());
        if samples.len() < DICTIONARY_SAMPLE_BYTES || sizes.len() < DICTIONARY_SAMPLE_BLOCKS {
            return;
        }
        // A training zstd refuses (samples too alike or too few) leaves the table without.
        *self = zstd::dict::from_continuous(samples, sizes, max_bytes)
            .ok()
            .and_then(|bytes| {
                let compressor = Box::new(dictionary_compressor(&bytes)?);
                Some(Dictionary::Made {
                    bytes,
                    compressor,
                    used: false,
                })
            })
            .unwrap_or(Dictionary::Off);
    }
}

/// What a finished table holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct TableSummary {
    pub file_size: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub entries: u64,
    pub deletions: u64,
    pub range_deletions: u64,
    /// Bloom filter bits per key, in thousandths.
    pub filter_millibits: u64,
}

pub(crate) struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    opts: TableOptions,
    offset: u64,
    data: BlockBuilder,
    index_entries: Vec<(Vec<u8>, BlockHandle)>,
    /// The last data block written and its last key, waiting for the next block's first key
    /// to choose the shortest key between the two for its index entry.
    pending_index: Option<(Vec<u8>, BlockHandle)>,
    filter: FilterBuilder,
    /// Partitioned filters: each partition finished so far, as the last internal key it
    /// covers and its block, written after the data blocks.
    partitions: Vec<(Vec<u8>, Vec<u8>)>,
    summary: TableSummary,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    data_blocks: u64,
    /// Range tombstones, written in a block of their own.
    range_dels: Vec<RangeTombstone>,
    /// The newest sequence number of an entry or tombstone.
    largest_seq: SeqNo,
    dictionary: Dictionary,
}

impl TableBuilder {
    pub(crate) fn new(file: Box<dyn WritableFile>, path: PathBuf, opts: TableOptions) -> Self {
        TableBuilder {
            file,
            path,
            dictionary: Dictionary::new(&opts),
            data: BlockBuilder::new(opts.restart_interval),
            filter: FilterBuilder::new(opts.bloom_bits_per_key, opts.filter_format),
            opts,
            offset: 0,
            index_entries: Vec::new(),
            pending_index: None,
            partitions: Vec::new(),
            summary: TableSummary::default(),
            raw_key_bytes: 0,
            raw_value_bytes: 0,
            data_blocks: 0,
            range_dels: Vec::new(),
            largest_seq: SeqNo(0),
        }
    }

    /// The user key of the last entry added, if any.
    pub(crate) fn last_user_key(&self) -> Option<&[u8]> {
        (self.summary.entries > 0).then(|| user_key(&self.summary.largest))
    }

    /// Ends every range tombstone added so far at `at` at the latest, and returns what lay
    /// past it, `[at, end)`, for the next file.
    pub(crate) fn clip_range_tombstones(&mut self, at: &[u8]) -> Vec<RangeTombstone> {
        let order = &self.opts.order;
        let mut rest = Vec::new();
        for t in &mut self.range_dels {
            if order.user(&t.end, at).is_gt() {
                let begin = order.max(&t.begin, at).to_vec();
                let end = std::mem::replace(&mut t.end, at.to_vec());
                rest.push(RangeTombstone {
                    begin,
                    end,
                    seq: t.seq,
                });
            }
        }
        // A tombstone that began at or after `at` went on whole.
        self.range_dels
            .retain(|t| order.user(&t.begin, &t.end).is_lt());
        rest
    }

    /// Whether a range tombstone added so far goes on past the user key `last`.
    pub(crate) fn range_tombstones_go_past(&self, last: &[u8]) -> bool {
        let order = &self.opts.order;
        self.range_dels
            .iter()
            .any(|t| order.user(&t.end, last).is_gt())
    }

    /// Counts `seq` in the table's newest sequence number (its `strata.largest-seq`
    /// property) for an entry added with its sequence written as zero: the property still
    /// tells repair which WAL records the table holds.
    pub(crate) fn note_forgotten_sequence(&mut self, seq: SeqNo) {
        self.largest_seq = self.largest_seq.max(seq);
    }

    /// Adds a range tombstone, in any order relative to the entries.
    pub(crate) fn add_range_tombstone(&mut self, t: &RangeTombstone) {
        self.largest_seq = self.largest_seq.max(t.seq);
        self.range_dels.push(t.clone());
    }

    /// Writes the range tombstones as a block of `(begin, seq, kind 3) -> end` entries in
    /// internal-key order, and widens the file's bounds to cover every range: from its
    /// begin, and to the last key it covers, as the key `(last, 0, deletion)`, which sorts
    /// after every version of `last`. For an end `x + [0]` (where compaction cuts a
    /// tombstone between two files) that is `x`: no key lies between `x` and `x + [0]`.
    /// For another end it is the end itself, which the tombstone does not cover, but the
    /// file is taken to hold, so that the next file of a level starts after it.
    fn write_range_dels(&mut self) -> Result<Option<BlockHandle>> {
        if self.range_dels.is_empty() {
            return Ok(None);
        }
        let mut list: Vec<(Vec<u8>, Vec<u8>)> = self
            .range_dels
            .iter()
            .map(|t| {
                (
                    internal_key(&t.begin, t.seq, ValueKind::RangeDelete),
                    t.end.clone(),
                )
            })
            .collect();
        let order = self.opts.order.clone();
        list.sort_by(|a, b| order.internal(&a.0, &b.0));
        list.dedup_by(|a, b| a.0 == b.0);
        let mut block = BlockBuilder::new(1);
        for (k, end) in &list {
            block.add(k, end);
            let s = &mut self.summary;
            if s.smallest.is_empty() || order.internal(k, &s.smallest).is_lt() {
                s.smallest = k.clone();
            }
            let last = match end.split_last() {
                Some((0, x)) if order.is_bytewise() => x,
                _ => end.as_slice(),
            };
            let upper = internal_key(last, SeqNo(0), ValueKind::Delete);
            if s.largest.is_empty() || order.internal(&upper, &s.largest).is_gt() {
                s.largest = upper;
            }
        }
        self.summary.range_deletions = list.len() as u64;
        let raw = block.finish();
        self.write_block(&raw, Compression::None).map(Some)
    }

    /// Adds an entry. Requires: internal keys arrive in increasing order.
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        // An aligned block ends before the entry that would make it, with its trailer,
        // larger than a page: first, so that a filter partition the flush may end holds
        // none of this entry's keys.
        if self.opts.align_blocks
            && !self.data.is_empty()
            && self.data.estimated_size() + ikey.len() + value.len() + ENTRY_OVERHEAD_BYTES
                > PAGE_BYTES - BLOCK_TRAILER_BYTES
        {
            self.flush_data_block()?;
        }
        if let Some((last, handle)) = self.pending_index.take() {
            let separator = self.separator(last, Some(ikey));
            self.index_entries.push((separator, handle));
        }
        if self.summary.entries == 0 {
            self.summary.smallest = ikey.to_vec();
        }
        debug_assert!(
            self.summary.entries == 0
                || self
                    .opts
                    .order
                    .internal(&self.summary.largest, ikey)
                    .is_lt()
        );
        self.summary.largest.clear();
        self.summary.largest.extend_from_slice(ikey);
        self.summary.entries += 1;
        if let Some(p) = parse_internal_key(ikey) {
            if p.kind == ValueKind::Delete {
                self.summary.deletions += 1;
            }
            self.largest_seq = self.largest_seq.max(p.seq);
        }
        self.raw_key_bytes += ikey.len() as u64;
        self.raw_value_bytes += value.len() as u64;
        self.filter.add_key(user_key(ikey));
        self.data.add(ikey, value);
        if self.data.estimated_size() >= self.opts.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Bytes the file will have, about, if finished now.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.offset + self.data.estimated_size() as u64
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let last = self.data.last_key().to_vec();
        let raw = self.data.finish();
        if self.opts.align_blocks {
            self.skip_to_page_holding(raw.len() + BLOCK_TRAILER_BYTES)?;
        }
        self.dictionary
            .sample(&raw, self.opts.zstd_dictionary_bytes);
        let (stored, kind) = match &mut self.dictionary {
            Dictionary::Made {
                compressor, used, ..
            } => {
                let (stored, kind) = compress_block_with(&raw, compressor);
                *used |= kind == Coding::ZstdDict;
                (stored, kind)
            }
            _ => compress_block(&raw, self.opts.compression),
        };
        let handle = self.write_stored(&stored, kind)?;
        // A partition ends with a data block once it holds a block's worth of filter bits.
        let per_partition =
            ((self.opts.block_size * 8) as f64 / self.opts.bloom_bits_per_key.max(1.0)) as usize;
        if self.opts.filter_kind == FilterKind::Partitioned
            && self.filter.keys() >= per_partition.max(1)
        {
            self.cut_partition(last.clone());
        }
        debug_assert!(self.pending_index.is_none());
        self.pending_index = Some((last, handle));
        self.data_blocks += 1;
        Ok(())
    }

    /// Ends the filter partition of the keys added since the last one; `last` is the last
    /// internal key it covers. A partition is a block of one entry, an empty key with the
    /// filter as its value, so that it is cached and checked as every other block is.
    fn cut_partition(&mut self, last: Vec<u8>) {
        let bits = self.filter.finish();
        let mut block = BlockBuilder::new(1);
        block.add(&[], &bits);
        self.partitions.push((last, block.finish()));
    }

    /// Writes the filter: whole, or its partitions and then their index, whose handle the
    /// footer keeps.
    fn write_filter(&mut self) -> Result<BlockHandle> {
        if self.opts.filter_kind == FilterKind::Whole {
            let filter = self.filter.finish();
            return self.write_block(&filter, Compression::None);
        }
        if self.filter.keys() > 0 {
            self.cut_partition(self.summary.largest.clone());
        }
        let mut index = BlockBuilder::new(1);
        for (last, block) in std::mem::take(&mut self.partitions) {
            let handle = self.write_block(&block, Compression::None)?;
            let mut v = Vec::with_capacity(20);
            handle.encode_varint(&mut v);
            index.add(&last, &v);
        }
        let raw = index.finish();
        self.write_block(&raw, Compression::None)
    }

    fn write_block(&mut self, raw: &[u8], compression: Compression) -> Result<BlockHandle> {
        let (stored, kind) = compress_block(raw, compression);
        self.write_stored(&stored, kind)
    }

    fn write_stored(&mut self, stored: &[u8], kind: Coding) -> Result<BlockHandle> {
        let trailer = block_trailer(stored, kind);
        let handle = BlockHandle {
            offset: self.offset,
            size: stored.len() as u64,
        };
        self.append(stored)?;
        self.append(&trailer)?;
        Ok(handle)
    }

    /// Zeroes the rest of the current page when a block of `len` bytes, no larger than a
    /// page, would cross its end: the block then starts on the next page.
    fn skip_to_page_holding(&mut self, len: usize) -> Result<()> {
        let used = (self.offset % PAGE_BYTES as u64) as usize;
        if used > 0 && len <= PAGE_BYTES && used + len > PAGE_BYTES {
            self.append(&[0u8; PAGE_BYTES][used..])?;
        }
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .append(bytes)
            .map_err(|e| Error::io("append", &self.path, e))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// The index key of a data block whose last key is `last`, followed by a block that
    /// starts with `next` (`None` for the table's last block): the shortest key the
    /// comparator finds at or after `last` and before `next`, as LevelDB's table builder
    /// chooses it. A shorter user key takes the trailer that sorts first among its
    /// versions, so that the index key stays below `next` whatever `next`'s sequence number;
    /// a comparator's answer outside that range is not taken.
    fn separator(&self, last: Vec<u8>, next: Option<&[u8]>) -> Vec<u8> {
        let order = &self.opts.order;
        let (from, to) = (user_key(&last), next.map(user_key));
        let mut short = from.to_vec();
        match to {
            Some(to) => order.shorten_separator(&mut short, to),
            None => order.shorten_successor(&mut short),
        }
        let between = short.len() < from.len()
            && order.user(from, &short).is_lt()
            && to.is_none_or(|to| order.user(&short, to).is_lt());
        match between {
            true => internal_key(&short, SeqNo::MAX, crate::key::SEEK_KIND),
            false => last,
        }
    }

    /// Writes index levels bottom-up; returns the root handle and the depth.
    fn write_index(&mut self) -> Result<(BlockHandle, u8)> {
        let mut entries = std::mem::take(&mut self.index_entries);
        let mut depth = 1u8;
        loop {
            let mut block = BlockBuilder::new(1);
            let mut next_level = Vec::new();
            let single = self.opts.index_kind == IndexKind::Flat;
            let count = entries.len();
            for (i, (key, handle)) in entries.iter().enumerate() {
                let mut v = Vec::with_capacity(20);
                handle.encode_varint(&mut v);
                block.add(key, &v);
                let last = i + 1 == count;
                if last || (!single && block.estimated_size() >= self.opts.block_size) {
                    let raw = block.finish();
                    let h = self.write_block(&raw, Compression::None)?;
                    next_level.push((key.clone(), h));
                }
            }
            if next_level.is_empty() {
                // A table with no entries still gets an empty root.
                let raw = block.finish();
                let h = self.write_block(&raw, Compression::None)?;
                return Ok((h, depth));
            }
            if next_level.len() == 1 {
                let (_, root) = next_level.remove(0);
                return Ok((root, depth));
            }
            entries = next_level;
            depth += 1;
        }
    }

    /// Writes filter, index, properties and footer, and syncs the file.
    pub(crate) fn finish(mut self) -> Result<TableSummary> {
        self.flush_data_block()?;
        if let Some((last, handle)) = self.pending_index.take() {
            let separator = self.separator(last, None);
            self.index_entries.push((separator, handle));
        }
        let data_bytes = self.offset;
        let filter_handle = self.write_filter()?;
        let filter_bytes = self.offset - data_bytes;
        let index_start = self.offset;
        let (index_handle, index_depth) = self.write_index()?;
        let index_bytes = self.offset - index_start;
        let dictionary = match std::mem::replace(&mut self.dictionary, Dictionary::Off) {
            Dictionary::Made {
                bytes, used: true, ..
            } => Some(self.write_block(&bytes, Compression::None)?),
            _ => None,
        };
        let range_dels = self.write_range_dels()?;
        let mut props = BlockBuilder::new(1);
        let mut pairs = vec![
            (prop::COMPRESSION, self.opts.compression as u64),
            (prop::DATA_BLOCKS, self.data_blocks),
            (prop::DATA_BYTES, data_bytes),
            (prop::DELETIONS, self.summary.deletions),
            (prop::ENTRIES, self.summary.entries),
            (prop::FILTER_BYTES, filter_bytes),
            (prop::INDEX_BYTES, index_bytes),
            (prop::RAW_KEY_BYTES, self.raw_key_bytes),
            (prop::RAW_VALUE_BYTES, self.raw_value_bytes),
            (prop::LARGEST_SEQ, self.largest_seq.0),
        ];
        if let Some(h) = range_dels {
            pairs.extend([
                (prop::RANGE_DELETIONS, self.summary.range_deletions),
                (prop::RANGE_DEL_OFFSET, h.offset),
                (prop::RANGE_DEL_SIZE, h.size),
            ]);
        }
        if let Some(h) = dictionary {
            pairs.extend([
                (prop::ZSTD_DICT_OFFSET, h.offset),
                (prop::ZSTD_DICT_SIZE, h.size),
            ]);
        }
        pairs.sort_by_key(|(name, _)| *name);
        for (name, value) in pairs {
            let mut v = Vec::new();
            crate::coding::put_varint(&mut v, value);
            props.add(name.as_bytes(), &v);
        }
        let raw = props.finish();
        let props_handle = self.write_block(&raw, Compression::None)?;
        let footer = Footer {
            filter: filter_handle,
            index: index_handle,
            properties: props_handle,
            index_kind: self.opts.index_kind,
            index_depth,
            filter_kind: self.opts.filter_kind,
            range_deletions: range_dels.is_some(),
            zstd_dictionary: dictionary.is_some(),
        };
        self.append(&footer.encode())?;
        self.file
            .sync()
            .map_err(|e| Error::io("fsync", &self.path, e))?;
        self.summary.file_size = self.offset;
        self.summary.filter_millibits = (self.opts.bloom_bits_per_key * 1000.0).round() as u64;
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};

    fn tombstone(begin: &str, end: &str, seq: u64) -> RangeTombstone {
        RangeTombstone {
            begin: begin.as_bytes().to_vec(),
            end: end.as_bytes().to_vec(),
            seq: SeqNo(seq),
        }
    }

    /// Clipping at a cut ends what spans it there and hands on the rest; a tombstone that
    /// begins past the cut goes on whole, never widened down to the cut.
    #[test]
    fn clipping_splits_only_what_spans_the_cut() {
        let fs = MemFs::new();
        fs.create_dir_all(std::path::Path::new("/")).unwrap();
        let file = fs.create(std::path::Path::new("/t.sst")).unwrap();
        let opts = TableOptions {
            block_size: 4096,
            restart_interval: 16,
            bloom_bits_per_key: 10.0,
            filter_format: crate::FilterFormat::default(),
            compression: super::Compression::None,
            index_kind: IndexKind::Flat,
            filter_kind: FilterKind::Whole,
            align_blocks: true,
            zstd_dictionary_bytes: 0,
            order: crate::comparator::KeyOrder::Bytewise,
        };
        let mut b = TableBuilder::new(file, "/t.sst".into(), opts);
        b.add_range_tombstone(&tombstone("a", "c", 5));
        b.add_range_tombstone(&tombstone("b", "x", 6));
        b.add_range_tombstone(&tombstone("m", "p", 7));
        let rest = b.clip_range_tombstones(b"k\0");
        assert_eq!(rest, vec![tombstone("k\0", "x", 6), tombstone("m", "p", 7)]);
        assert_eq!(
            b.range_dels,
            vec![tombstone("a", "c", 5), tombstone("b", "k\0", 6)]
        );
        let s = b.finish().unwrap();
        // The bound of an end `k` + 0x00 is `k`.
        assert_eq!(user_key(&s.largest), b"k");
        assert_eq!(user_key(&s.smallest), b"a");
    }

    /// Blocks of one large value each give the dictionary's samples their first 16 KiB, not
    /// their whole megabyte; sixteen of them still train it.
    #[test]
    fn large_blocks_give_the_dictionary_their_first_bytes() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let words = [
            "strata", "level", "table", "block", "filter", "index", "key", "value",
        ];
        let mut block = || -> Vec<u8> {
            let mut out = Vec::with_capacity(1 << 20);
            while out.len() < 1 << 20 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                out.extend_from_slice(words[(state % 8) as usize].as_bytes());
                out.extend_from_slice(format!(" {} ", state % 1000).as_bytes());
            }
            out
        };
        let mut d = Dictionary::Sampling {
            samples: Vec::new(),
            sizes: Vec::new(),
        };
        for _ in 0..15 {
            d.sample(&block(), 16 << 10);
        }
        let Dictionary::Sampling { samples, sizes } = &d else {
            panic!("trained before sixteen blocks");
        };
        assert_eq!(sizes, &vec![16 << 10; 15]);
        assert_eq!(samples.len(), 15 << 14);
        d.sample(&block(), 16 << 10);
        assert!(
            matches!(d, Dictionary::Made { .. }),
            "sixteen blocks train it"
        );
    }
}
