//! Blocks: sorted entries with prefix-compressed keys and restart points.
//!
//! ```text
//! entry*  where entry = shared: varint | unshared: varint | value_len: varint
//!                       | key bytes past the shared prefix | value
//! restarts: u32 LE * num_restarts     offsets of entries stored with shared = 0
//! num_restarts: u32 LE
//! ```
//! Data and index blocks hold internal keys; the properties block holds plain names.

#![deny(clippy::indexing_slicing)]

use std::cmp::Ordering;
use std::ops::Deref;
use std::sync::Arc;

use super::heads::Heads;
use crate::coding::{Reader, put_u32, put_varint, u32_at};
use crate::comparator::KeyOrder;
use crate::error::{DecodeError, Error, Result};
use crate::fs::MappedBytes;
use crate::iter::InternalIterator;

/// The order of a block's keys: internal keys in the database's key order (data and index
/// blocks), or plain names bytewise (the properties block, a filter's partition index).
#[derive(Clone, Debug)]
pub(crate) enum BlockOrder {
    Internal(KeyOrder),
    Plain,
}

impl BlockOrder {
    #[inline]
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            BlockOrder::Internal(order) => order.internal(a, b),
            BlockOrder::Plain => crate::key::compare_bytes(a, b),
        }
    }
}

/// A seek prefetches every restart key when there are at most this many to search.
const PREFETCH_RESTARTS: usize = 8;
/// A seek prefetches at most this much of the restart interval it scans.
const PREFETCH_SCAN_BYTES: usize = 1024;

/// Builds one block.
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    since_restart: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    pub(crate) fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            since_restart: 0,
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Adds an entry. Requires: `key` sorts after every key added before.
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.since_restart >= self.restart_interval {
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        } else {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let unshared = key.get(shared..).unwrap_or_default();
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, unshared.len() as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(unshared);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(unshared);
        self.since_restart += 1;
        self.entries += 1;
    }

    pub(crate) fn estimated_size(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Finishes the block and resets the builder for the next one.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            put_u32(&mut out, *r);
        }
        put_u32(&mut out, self.restarts.len() as u32);
        self.restarts = vec![0];
        self.since_restart = 0;
        self.last_key.clear();
        self.entries = 0;
        out
    }
}

/// Restart offsets a block keeps beside its header.
const INLINE_RESTARTS: usize = 4;

/// A decoded, immutable block.
///
/// The fields a search reads first come first, within 48 bytes of the start of the block's
/// allocation, and the first restart offsets are copied there from the end of the block: a
/// lookup in a data block of a few restart intervals goes from the header straight to the
/// restart keys instead of waiting for the restart array first. (Aligning the header to a
/// cache line would cost an aligned allocation for every block read, which counted 8% more
/// instructions per random seek than the line it saves.)
#[repr(C)]
pub(crate) struct Block {
    restarts_offset: usize,
    num_restarts: usize,
    /// The first restart offsets, as stored (checked when used, as the array is).
    first_restarts: [u32; INLINE_RESTARTS],
    data: BlockData,
    /// Search heads of the restart keys, in index blocks held open by their tables.
    heads: Option<Box<Heads>>,
}

/// Where a block's bytes live: read into memory, or in place in a mapped file.
pub(crate) enum BlockData {
    Owned(Vec<u8>),
    Mapped(MappedBytes),
}

impl Deref for BlockData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockData::Owned(v) => v,
            BlockData::Mapped(m) => m.bytes(),
        }
    }
}

impl From<Vec<u8>> for BlockData {
    fn from(v: Vec<u8>) -> Self {
        BlockData::Owned(v)
    }
}

impl Block {
    pub(crate) fn new(data: impl Into<BlockData>) -> Result<Block, DecodeError> {
        let data = data.into();
        let n = data
            .len()
            .checked_sub(4)
            .ok_or(DecodeError("block too short"))?;
        let num_restarts = u32_at(&data, n)? as usize;
        let restarts_offset = num_restarts
            .checked_mul(4)
            .and_then(|b| n.checked_sub(b))
            .ok_or(DecodeError("restart array exceeds block"))?;
        if num_restarts == 0 {
            return Err(DecodeError("block without restart points"));
        }
        let mut first_restarts = [0; INLINE_RESTARTS];
        for (i, r) in first_restarts.iter_mut().enumerate().take(num_restarts) {
            *r = u32_at(&data, restarts_offset + i * 4)?;
        }
        Ok(Block {
            restarts_offset,
            num_restarts,
            first_restarts,
            data,
            heads: None,
        })
    }

    /// Adds search heads over the restart keys, which must be internal keys (a block of an
    /// index). Worth it for blocks held open and searched often.
    pub(crate) fn with_search_heads(mut self) -> Result<Block, DecodeError> {
        if self.restarts_offset == 0 {
            // No entries: the index of a table that holds only range tombstones.
            return Ok(self);
        }
        // The user key as `KeyOrder::internal` sees it, so that heads order as it does.
        let user_key = |i| self.restart_key(i).map(crate::key::user_key);
        let (lo, hi) = if self.num_restarts >= 4 {
            (1, self.num_restarts - 2)
        } else {
            (0, self.num_restarts - 1)
        };
        let first = user_key(lo)?;
        let last = user_key(hi)?;
        let p = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let prefix = first.get(..p).unwrap_or_default().to_vec();
        let mut words = Vec::with_capacity(self.num_restarts);
        for i in 0..self.num_restarts {
            words.push(Heads::head(&prefix, user_key(i)?));
        }
        let heads = Heads::new(prefix, &words).ok_or(DecodeError("index keys out of order"))?;
        self.heads = Some(Box::new(heads));
        Ok(self)
    }

    /// Where a seek for the internal key `target` lands when the search heads alone settle
    /// it: the index of the first restart key at or after `target` (the number of restarts
    /// when every key is below it). `None` without heads, or when a restart key's head
    /// equals the target's and only whole keys can tell.
    pub(crate) fn restart_settled_by_heads(&self, target: &[u8]) -> Option<usize> {
        let c = self
            .heads
            .as_ref()?
            .candidates(crate::key::user_key(target));
        c.is_empty().then_some(c.start)
    }

    /// Hints that a seek in this block will come soon: asks for the lines of the restart keys
    /// whose offsets the header holds, which are all a small data block's search compares.
    pub(crate) fn prefetch_restart_keys(&self) {
        for &off in self.first_restarts.iter().take(self.num_restarts) {
            crate::prefetch::line(self.data.as_ptr().wrapping_add(off as usize));
        }
    }

    pub(crate) fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Bytes held: the contents and any search heads.
    pub(crate) fn size(&self) -> usize {
        self.data.len() + self.heads.as_ref().map_or(0, |h| h.size())
    }

    /// The key stored at a restart point (stored whole, with no shared prefix).
    fn restart_key(&self, index: usize) -> Result<&[u8], DecodeError> {
        let off = self.restart(index)?;
        let mut r = Reader::new(self.data.get(off..self.restarts_offset).unwrap_or_default());
        let (shared, unshared, _) = entry_header(&mut r)?;
        if shared != 0 {
            return Err(DecodeError("restart entry shares a prefix"));
        }
        r.bytes(unshared)
    }

    fn restart(&self, i: usize) -> Result<usize, DecodeError> {
        let off = match self.first_restarts.get(i) {
            Some(&off) if i < self.num_restarts => off as usize,
            _ => u32_at(&self.data, self.restarts_offset + i * 4)? as usize,
        };
        if off > self.restarts_offset {
            return Err(DecodeError("restart point past the entries"));
        }
        Ok(off)
    }

    pub(crate) fn iter(self: &Arc<Self>, cmp: BlockOrder) -> BlockIter {
        BlockIter::new(self.clone(), cmp)
    }

    /// A cursor that borrows the block, for a search that ends before the borrow does.
    pub(crate) fn iter_ref(&self, cmp: BlockOrder) -> BlockIter<&Block> {
        BlockIter::new(self, cmp)
    }
}

impl<B: Deref<Target = Block>> BlockIter<B> {
    fn new(block: B, cmp: BlockOrder) -> Self {
        let end = block.restarts_offset;
        BlockIter {
            block,
            cmp,
            offset: end,
            next_offset: end,
            restart_index: 0,
            next_restart: 0,
            key: Vec::new(),
            value: (0, 0),
            back: Vec::new(),
            back_keys: Vec::new(),
            back_pos: None,
        }
    }
}

/// A cursor over a block, which it holds (an `Arc`) or borrows. A damaged entry makes the
/// movement return `Corruption`; the caller that knows the file fills in its name, so the
/// path here is left empty.
pub(crate) struct BlockIter<B = Arc<Block>> {
    block: B,
    cmp: BlockOrder,
    /// Offset of the current entry; `restarts_offset` when not valid.
    offset: usize,
    next_offset: usize,
    /// The restart interval of the current entry, and where the next one begins (the end
    /// of the entries after the last).
    restart_index: usize,
    next_restart: usize,
    key: Vec<u8>,
    value: (usize, usize),
    /// The entries of the restart interval that the cursor last stepped back into, decoded
    /// once, so that each further step back is a copy instead of a scan from the restart
    /// point. Their keys lie end to end in `back_keys`.
    back: Vec<Decoded>,
    back_keys: Vec<u8>,
    /// The current entry's index in `back`, while the cursor is on one of them.
    back_pos: Option<usize>,
}

/// An entry as decoded into [`BlockIter::back`].
#[derive(Clone, Copy)]
struct Decoded {
    offset: usize,
    next_offset: usize,
    value: (usize, usize),
    /// Where the entry's key ends in `back_keys`; it starts where the previous one ends.
    key_end: usize,
}

/// An entry's shared, unshared and value lengths, read whole in one step when each fits in
/// one byte (as in every entry with keys and values under 128 bytes).
#[inline]
fn entry_header(r: &mut Reader<'_>) -> Result<(usize, usize, usize), DecodeError> {
    if let Some(&[a, b, c]) = r.peek(3)
        && (a | b | c) < 0x80
    {
        r.bytes(3)?;
        return Ok((usize::from(a), usize::from(b), usize::from(c)));
    }
    Ok((r.varint_usize()?, r.varint_usize()?, r.varint_usize()?))
}

fn corrupt(e: DecodeError) -> Error {
    Error::corruption("", 0, e.0)
}

impl<B: Deref<Target = Block>> BlockIter<B> {
    fn invalidate(&mut self) {
        self.back_pos = None;
        self.offset = self.block.restarts_offset;
        self.next_offset = self.block.restarts_offset;
    }

    /// Decodes the entry at `next_offset` into the cursor.
    fn parse_next(&mut self) -> Result<bool, DecodeError> {
        let start = self.next_offset;
        let limit = self.block.restarts_offset;
        if start >= limit {
            self.invalidate();
            return Ok(false);
        }
        let entries = self
            .block
            .data
            .get(..limit)
            .ok_or(DecodeError("bad block"))?;
        let mut r = Reader::new(entries.get(start..).unwrap_or_default());
        let (shared, unshared, vlen) = entry_header(&mut r)?;
        if shared > self.key.len() {
            return Err(DecodeError("shared prefix longer than previous key"));
        }
        let delta = r.bytes(unshared)?;
        let vstart = start + r.position();
        r.bytes(vlen)?;
        self.key.truncate(shared);
        self.key.extend_from_slice(delta);
        self.value = (vstart, vlen);
        self.offset = start;
        self.next_offset = vstart + vlen;
        while self.offset >= self.next_restart {
            self.restart_index += 1;
            self.next_restart = self.restart_end(self.restart_index)?;
        }
        Ok(true)
    }

    /// Where restart interval `index` ends.
    fn restart_end(&self, index: usize) -> Result<usize, DecodeError> {
        if index + 1 < self.block.num_restarts {
            self.block.restart(index + 1)
        } else {
            Ok(self.block.restarts_offset)
        }
    }

    fn seek_to_restart(&mut self, index: usize) -> Result<(), DecodeError> {
        self.back_pos = None;
        self.key.clear();
        self.restart_index = index;
        self.next_offset = self.block.restart(index)?;
        self.next_restart = self.restart_end(index)?;
        Ok(())
    }

    fn seek_inner(&mut self, target: &[u8]) -> Result<(), DecodeError> {
        // Last restart point whose key is < target (or the first).
        let (mut lo, mut hi) = (0usize, self.block.num_restarts - 1);
        if let Some(heads) = &self.block.heads {
            // Every restart before the candidates is below the target, every one from
            // their end is above; the answer is the last below, within the candidates or
            // just before them.
            let c = heads.candidates(crate::key::user_key(target));
            lo = c.start.saturating_sub(1);
            hi = c.end.saturating_sub(1).max(lo);
        }
        if hi - lo <= PREFETCH_RESTARTS {
            // A data block has only a few restart keys: ask for all of them at once, so that
            // the probes of the search do not wait for one miss after another.
            for i in lo + 1..=hi {
                let off = self.block.restart(i)?;
                crate::prefetch::line(self.block.data.get(off..).unwrap_or_default().as_ptr());
            }
        }
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.cmp.compare(self.block.restart_key(mid)?, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.seek_to_restart(lo)?;
        // The scan reads the interval front to back; ask for its lines before the first
        // entry is decoded.
        let end = self
            .next_restart
            .min(self.next_offset + PREFETCH_SCAN_BYTES);
        crate::prefetch::bytes(
            self.block
                .data
                .get(self.next_offset..end)
                .unwrap_or_default(),
        );
        while self.parse_next()? {
            if self.cmp.compare(&self.key, target) != Ordering::Less {
                return Ok(());
            }
        }
        Ok(())
    }

    fn prev_inner(&mut self) -> Result<(), DecodeError> {
        if let Some(i) = self.back_pos.and_then(|i| i.checked_sub(1)) {
            return self.load_back(i);
        }
        let original = self.offset;
        while self.block.restart(self.restart_index)? >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return Ok(());
            }
            self.restart_index -= 1;
        }
        // Decode the interval up to the original entry, keeping every entry.
        self.seek_to_restart(self.restart_index)?;
        self.back.clear();
        self.back_keys.clear();
        while self.parse_next()? {
            self.back_keys.extend_from_slice(&self.key);
            self.back.push(Decoded {
                offset: self.offset,
                next_offset: self.next_offset,
                value: self.value,
                key_end: self.back_keys.len(),
            });
            if self.next_offset >= original {
                break;
            }
        }
        self.back_pos = self.back.len().checked_sub(1);
        Ok(())
    }

    /// Moves onto entry `i` of `back`.
    fn load_back(&mut self, i: usize) -> Result<(), DecodeError> {
        let bad = || DecodeError("bad block");
        let d = *self.back.get(i).ok_or_else(bad)?;
        let start = match i.checked_sub(1) {
            Some(p) => self.back.get(p).ok_or_else(bad)?.key_end,
            None => 0,
        };
        self.key.clear();
        self.key
            .extend_from_slice(self.back_keys.get(start..d.key_end).ok_or_else(bad)?);
        self.offset = d.offset;
        self.next_offset = d.next_offset;
        self.value = d.value;
        self.back_pos = Some(i);
        Ok(())
    }

    fn last_inner(&mut self) -> Result<(), DecodeError> {
        self.seek_to_restart(self.block.num_restarts - 1)?;
        while self.parse_next()? && self.next_offset < self.block.restarts_offset {}
        Ok(())
    }

    fn wrap(&mut self, r: Result<(), DecodeError>) -> Result<()> {
        r.map_err(|e| {
            self.invalidate();
            corrupt(e)
        })
    }
}

impl<B: Deref<Target = Block> + Send> InternalIterator for BlockIter<B> {
    fn valid(&self) -> bool {
        self.offset < self.block.restarts_offset
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let r = self
            .seek_to_restart(0)
            .and_then(|()| self.parse_next().map(|_| ()));
        self.wrap(r)
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let r = self.last_inner();
        self.wrap(r)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let r = self.seek_inner(target);
        self.wrap(r)
    }
    fn next(&mut self) -> Result<()> {
        debug_assert!(self.valid());
        self.back_pos = None;
        let r = self.parse_next().map(|_| ());
        self.wrap(r)
    }
    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.valid());
        let r = self.prev_inner();
        self.wrap(r)
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        let (start, len) = self.value;
        self.block.data.get(start..start + len).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn build(n: usize, interval: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(interval);
        for i in 0..n {
            b.add(
                format!("key{:05}", i * 2).as_bytes(),
                format!("v{i}").as_bytes(),
            );
        }
        Arc::new(Block::new(b.finish()).unwrap())
    }

    #[test]
    fn iterates_and_seeks_at_every_restart_interval() {
        for interval in [1, 2, 16] {
            let block = build(100, interval);
            let mut it = block.iter(BlockOrder::Plain);
            it.seek_to_first().unwrap();
            let mut n = 0;
            while it.valid() {
                assert_eq!(it.key(), format!("key{:05}", n * 2).as_bytes());
                assert_eq!(it.value(), format!("v{n}").as_bytes());
                n += 1;
                it.next().unwrap();
            }
            assert_eq!(n, 100);
            it.seek_to_last().unwrap();
            let mut m = 100;
            while it.valid() {
                m -= 1;
                assert_eq!(it.key(), format!("key{:05}", m * 2).as_bytes());
                it.prev().unwrap();
            }
            assert_eq!(m, 0);
            it.seek(b"key00051").unwrap();
            assert_eq!(it.key(), b"key00052");
            it.seek(b"key00052").unwrap();
            assert_eq!(it.key(), b"key00052");
            it.seek(b"zzz").unwrap();
            assert!(!it.valid());
            it.seek(b"").unwrap();
            assert_eq!(it.key(), b"key00000");
        }
    }

    #[test]
    fn random_walks_back_and_forth_match_the_entries() {
        for interval in [1, 3, 16] {
            let block = build(100, interval);
            let mut it = block.iter(BlockOrder::Plain);
            let mut x = 12_345u64 + interval as u64;
            let mut at: Option<usize> = None;
            for _ in 0..3_000 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let roll = (x >> 33) % 10;
                match (at, roll) {
                    (_, 0) => {
                        let i = ((x >> 40) % 100) as usize;
                        it.seek(format!("key{:05}", i * 2).as_bytes()).unwrap();
                        at = Some(i);
                    }
                    (None, _) => {
                        it.seek_to_last().unwrap();
                        at = Some(99);
                    }
                    // Mostly backwards, with steps forward mixed in.
                    (Some(i), 1..=3) => {
                        it.next().unwrap();
                        at = (i + 1 < 100).then_some(i + 1);
                    }
                    (Some(i), _) => {
                        it.prev().unwrap();
                        at = i.checked_sub(1);
                    }
                }
                match at {
                    Some(i) => {
                        assert!(it.valid());
                        assert_eq!(it.key(), format!("key{:05}", i * 2).as_bytes());
                        assert_eq!(it.value(), format!("v{i}").as_bytes());
                    }
                    None => assert!(!it.valid()),
                }
            }
        }
    }

    #[test]
    fn prefix_compression_saves_space() {
        let block = build(100, 16);
        assert!(block.size() < 100 * 8 + 100 * 3, "size {}", block.size());
    }

    #[test]
    fn damaged_blocks_give_errors_not_panics() {
        let good = {
            let mut b = BlockBuilder::new(4);
            for i in 0..20 {
                b.add(format!("k{i:03}").as_bytes(), b"value");
            }
            b.finish()
        };
        for i in 0..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= bit;
                let Ok(block) = Block::new(bad) else { continue };
                let block = Arc::new(block);
                let mut it = block.iter(BlockOrder::Plain);
                let _ = it.seek(b"k010");
                let mut steps = 0;
                if it.seek_to_first().is_ok() {
                    while it.valid() && steps < 100 {
                        if it.next().is_err() {
                            break;
                        }
                        steps += 1;
                    }
                }
                if it.seek_to_last().is_ok() {
                    while it.valid() && steps < 200 {
                        if it.prev().is_err() {
                            break;
                        }
                        steps += 1;
                    }
                }
            }
        }
        assert!(Block::new(vec![1, 0]).is_err());
        assert!(Block::new(vec![0, 0, 0, 0]).is_err());
        assert!(Block::new(vec![9, 0, 0, 0]).is_err());
    }

    /// Seeks with search heads land where seeks without them do, over internal keys of
    /// varied lengths around a shared prefix (in half the rounds with a key of another kind
    /// at either end), with several versions of one user key, and targets below, inside and
    /// above the prefix.
    #[test]
    fn seeks_with_search_heads_match_seeks_without() {
        use crate::key::{SeqNo, ValueKind, internal_key};
        let x = std::cell::Cell::new(99u64);
        let rand = |n: u64| {
            let mut v = x.get();
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
            x.set(v);
            v % n
        };
        let user_key = |prefix: &[u8]| {
            let mut k = prefix.to_vec();
            for _ in 0..rand(12) {
                k.push(b"\0ab\xffz"[rand(5) as usize]);
            }
            k
        };
        let mut settled = 0;
        for (round, prefix) in [&b""[..], b"pre", b"0000000000"]
            .iter()
            .cycle()
            .take(60)
            .enumerate()
        {
            let mut keys: Vec<Vec<u8>> = (0..1 + round * 3).map(|_| user_key(prefix)).collect();
            if round % 2 == 1 {
                // Keys of another kind at either end, without the prefix the others share.
                keys.push(b"\x01first".to_vec());
                keys.push(b"\xff\xfflast".to_vec());
            }
            keys.sort();
            keys.dedup();
            let mut b = BlockBuilder::new(1 + round % 3);
            for (i, k) in keys.iter().enumerate() {
                // Two versions of every third key, newest first.
                if i % 3 == 0 {
                    b.add(&internal_key(k, SeqNo(9), ValueKind::Value), b"new");
                }
                b.add(&internal_key(k, SeqNo(5), ValueKind::Value), b"old");
            }
            let raw = b.finish();
            let plain = Arc::new(Block::new(raw.clone()).unwrap());
            let headed = Arc::new(Block::new(raw).unwrap().with_search_heads().unwrap());
            assert!(headed.heads.is_some());
            let (mut p, mut h) = (
                plain.iter(BlockOrder::Internal(KeyOrder::Bytewise)),
                headed.iter(BlockOrder::Internal(KeyOrder::Bytewise)),
            );
            for _ in 0..200 {
                let target_user = match rand(6) {
                    0 => keys[rand(keys.len() as u64) as usize].clone(),
                    1 => user_key(&prefix[..rand(prefix.len() as u64 + 1) as usize]),
                    2 => user_key(b"\xff"),
                    3 => user_key(b"\x01"),
                    _ => user_key(prefix),
                };
                let target = internal_key(&target_user, SeqNo(rand(12)), ValueKind::Value);
                p.seek(&target).unwrap();
                h.seek(&target).unwrap();
                assert_eq!(p.valid(), h.valid(), "{target_user:?}");
                if p.valid() {
                    assert_eq!(p.key(), h.key(), "{target_user:?}");
                    assert_eq!(p.value(), h.value());
                }
                // Where the heads alone settle a seek, it is where the seek lands (an
                // index block restarts at every entry, so restart i is entry i).
                if let Some(i) = headed.restart_settled_by_heads(&target)
                    && round % 3 == 0
                {
                    settled += 1;
                    if i == headed.num_restarts() {
                        assert!(!p.valid(), "{target_user:?}");
                    } else {
                        assert_eq!(p.key(), headed.restart_key(i).unwrap(), "{target_user:?}");
                    }
                }
            }
        }
        assert!(settled > 1000, "the heads settled only {settled} seeks");
    }
}
