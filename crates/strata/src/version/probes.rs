//! The lists a batched lookup ([`Version::get_many`](super::Version::get_many)) works through
//! level by level, kept from one batch to the next.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{FileMeta, ReadCharge, ReadCompaction};
use crate::error::{Error, Result};
use crate::fs::RandomAccessFile;
use crate::sstable::block::Block;
use crate::sstable::format::BlockHandle;
use crate::sstable::parallel_read::{self, ReadRequest};
use crate::sstable::reader::{Held, PinnedFilter, Table, TableEntry};

/// A data block that may hold a key of a batched lookup: the file it is in, its level, the
/// block, and the file's place among those the key's lookup consulted (0 for the first).
/// A lookup that failed before it named a block carries its error instead.
struct Candidate<'a> {
    key: usize,
    level: usize,
    file: &'a Arc<FileMeta>,
    table: Option<&'a Table>,
    /// `Ok(None)`: the filter passed the key, and the index names no block for it.
    handle: Result<Option<BlockHandle>>,
    place: u32,
}

/// A key of a batched lookup at a file whose filter it is about to ask: (key, file, table,
/// filter).
type FilterProbe<'a> = (usize, &'a Arc<FileMeta>, &'a Arc<Table>, Held<PinnedFilter>);

/// The lists a batched lookup works through, kept from one batch to the next so that a
/// batch allocates little of its own.
#[derive(Default)]
pub(crate) struct Probes<'a> {
    /// (key, file): the file of the current level or level-0 file that may hold the key.
    pub(super) files: Vec<(usize, &'a Arc<FileMeta>)>,
    tables: Vec<FilterProbe<'a>>,
    /// Every block that may hold a key, found level by level from the filters and indexes
    /// the tables hold; the blocks are read after, all together.
    candidates: Vec<Candidate<'a>>,
    /// By key: how many files its lookup consulted.
    consulted: Vec<u32>,
    /// By candidate: its block, once read.
    blocks: Vec<Option<Arc<Block>>>,
    /// The blocks to read from files, by candidate, with the earlier candidate of the same
    /// block, if any.
    reads: Vec<(usize, ReadRequest, Option<usize>)>,
    requests: Vec<ReadRequest>,
    /// By request: its entry of `reads`.
    request_reads: Vec<usize>,
    /// Handles that keep the descriptors of `requests` open until they are read.
    keep_open: Vec<Arc<dyn RandomAccessFile>>,
}

impl<'a> Probes<'a> {
    /// Makes the lists ready for a batch of `keys` keys.
    pub(super) fn start(&mut self, keys: usize) {
        self.candidates.clear();
        self.consulted.clear();
        self.consulted.resize(keys, 0);
    }

    /// Finds, for each `(key, file)` of `self.files` (files of `level`), the data block that
    /// may hold the key: the Bloom filters' bits first (asked for before they are read),
    /// then the index searches for the keys the filters pass. Reads no data block.
    pub(super) fn find(
        &mut self,
        level: usize,
        lookups: &[&[u8]],
        keys: &[&[u8]],
        fill_cache: bool,
    ) {
        let key = |i: usize| keys.get(i).copied().unwrap_or_default();
        let lookup = |i: usize| lookups.get(i).copied().unwrap_or_default();
        self.tables.clear();
        for &(i, f) in &self.files {
            let Some(place) = self.consulted.get_mut(i) else {
                continue;
            };
            let place_now = *place;
            *place += 1;
            let failed = |e| Candidate {
                key: i,
                level,
                file: f,
                table: None,
                handle: Err(e),
                place: place_now,
            };
            match f.table().and_then(|t| Ok((t, t.filter()?))) {
                Ok((t, filter)) => {
                    filter.prefetch(key(i));
                    self.tables.push((i, f, t, filter));
                }
                Err(e) => self.candidates.push(failed(e)),
            }
        }
        // Each key's hold on its table's filter ends with this step; the index is read only
        // for the keys the filter passes.
        for (i, f, t, filter) in self.tables.drain(..) {
            let place = self.consulted.get(i).map_or(0, |c| c - 1);
            // The filter's answer, then the index's: a false positive of the filter counts
            // only if the search reaches this file (a newer one may answer the key).
            let handle = match t.may_contain(&filter, lookup(i), key(i), fill_cache) {
                Ok(false) => continue,
                Ok(true) => t
                    .index()
                    .and_then(|root| t.find_data_block(&root, lookup(i), fill_cache)),
                Err(e) => Err(e),
            };
            self.candidates.push(Candidate {
                key: i,
                level,
                file: f,
                table: Some(t),
                handle,
                place,
            });
        }
    }

    /// Reads the candidates' blocks: those in the cache or the mapping at once, the rest from
    /// their files all in flight together where the kernel allows it. A read that fails
    /// here is made again by the search, which reports its error where the lookup needs it.
    pub(super) fn read(&mut self, fill_cache: bool) {
        self.blocks.clear();
        self.blocks.resize(self.candidates.len(), None);
        self.reads.clear();
        self.keep_open.clear();
        for (c, cand) in self.candidates.iter().enumerate() {
            let (Ok(Some(h)), Some(t)) = (&cand.handle, cand.table) else {
                continue;
            };
            let h = *h;
            // One look at the cache a block: a hit is taken at once.
            if let Some(b) = t.cached_block(h) {
                crate::prefetch::line(Arc::as_ptr(&b));
                self.blocks[c] = Some(b);
            } else if let Some((read, keep)) = t.pread_of(h, fill_cache) {
                self.keep_open.extend(keep);
                // Two keys in one block read it once.
                let same = self.reads.iter().position(|&(d, _, _)| {
                    self.candidates.get(d).is_some_and(|o| {
                        o.table.is_some_and(|ot| std::ptr::eq(ot, t))
                            && matches!(o.handle, Ok(Some(oh)) if oh.offset == h.offset)
                    })
                });
                self.reads.push((c, read, same));
            } else if let Ok(b) = t.read_uncached(h, fill_cache) {
                crate::prefetch::line(Arc::as_ptr(&b));
                self.blocks[c] = Some(b);
            }
        }
        self.requests.clear();
        self.request_reads.clear();
        for (r, &(_, read, same)) in self.reads.iter().enumerate() {
            if same.is_none() {
                self.requests.push(read);
                self.request_reads.push(r);
            }
        }
        if self.requests.len() < 2 {
            self.keep_open.clear();
            return;
        }
        // Each block is checked, parsed and cached as its read lands, while the device serves
        // the batch's other reads.
        let (candidates, reads, blocks) = (&self.candidates, &self.reads, &mut self.blocks);
        let request_reads = &self.request_reads;
        let used = parallel_read::read_each(&self.requests, |q, answer| {
            let Some(&(c, _, _)) = request_reads.get(q).and_then(|&r| reads.get(r)) else {
                return;
            };
            let Some((t, &Ok(Some(h)))) = candidates
                .get(c)
                .and_then(|cand| Some((cand.table?, &cand.handle)))
            else {
                return;
            };
            if let (Ok(b), Some(slot)) =
                (t.block_from_read(h, answer, fill_cache), blocks.get_mut(c))
            {
                crate::prefetch::line(Arc::as_ptr(&b));
                *slot = Some(b);
            }
        });
        self.keep_open.clear();
        if !used {
            return;
        }
        // Two keys in one block: the later takes the earlier's.
        for &(c, _, same) in &self.reads {
            let Some(d) = same else { continue };
            let first = self
                .reads
                .get(d)
                .and_then(|&(dc, _, _)| self.blocks.get(dc).cloned().flatten());
            if let (Some(b), Some(slot)) = (first, self.blocks.get_mut(c)) {
                *slot = Some(b);
            }
        }
        if let Some(first) = self.candidates.first() {
            let n = self.requests.len() as u64;
            first
                .file
                .store
                .parallel_reads
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Searches each key's candidate blocks in the order its lookup consulted their files,
    /// until one holds an entry of the key; charges a file read in vain when the lookup went
    /// on to another (see [`ReadCharge`]).
    pub(super) fn search(
        &mut self,
        lookups: &[&[u8]],
        keys: &[&[u8]],
        fill_cache: bool,
        out: &mut [Option<Result<Option<TableEntry>>>],
        exhausted: &mut Option<ReadCompaction>,
    ) {
        let key = |i: usize| keys.get(i).copied().unwrap_or_default();
        let lookup = |i: usize| lookups.get(i).copied().unwrap_or_default();
        let mut order: Vec<usize> = (0..self.candidates.len()).collect();
        // Level by level they were found: by key, then in the order consulted.
        order.sort_by_key(|&c| self.candidates.get(c).map(|c| (c.key, c.place)));
        let mut charge = ReadCharge::default();
        let mut last_key = usize::MAX;
        for c in order {
            let Some(cand) = self.candidates.get_mut(c) else {
                continue;
            };
            let i = cand.key;
            if i != last_key {
                charge = ReadCharge::default();
                last_key = i;
            }
            let Some(o) = out.get_mut(i) else { continue };
            if o.is_some() {
                continue;
            }
            let (h, t) = match (
                std::mem::replace(&mut cand.handle, Err(Error::Closed)),
                cand.table,
            ) {
                (Ok(Some(h)), Some(t)) => (h, t),
                (Ok(None), Some(t)) => {
                    t.false_positive();
                    continue;
                }
                (Err(e), _) => {
                    *o = Some(Err(e));
                    continue;
                }
                (Ok(_), None) => continue,
            };
            cand.handle = Ok(Some(h));
            let block = match self.blocks.get_mut(c).and_then(Option::take) {
                Some(b) => Ok(b),
                None => t.read_block(h, fill_cache),
            };
            let found = block.and_then(|b| {
                b.prefetch_restart_keys();
                t.get_in_block(&b, h, lookup(i), key(i))
            });
            match found {
                Ok(None) => {
                    t.false_positive();
                    charge.missed(cand.level, cand.file);
                    if cand.place + 1 < self.consulted.get(i).copied().unwrap_or(0) {
                        charge.consult(exhausted);
                    }
                }
                r => *o = Some(r),
            }
        }
    }
}
