//! Every entry of a super-version, merged in internal-key order: what iterators and the
//! newest-sequence lookup walk.

use std::sync::Arc;

use super::family::SuperVersion;
use crate::error::{Error, Result};
use crate::iter::BoxedIter;
use crate::iter::level::LevelIterator;
use crate::iter::merge::MergingIterator;

/// Every entry of every memtable and table of `sv`, merged in internal-key order.
pub(super) fn internal_iter(sv: &SuperVersion, fill: bool) -> MergingIterator {
    {
        let levels = sv.version.levels.iter().skip(1).filter(|f| !f.is_empty());
        let mut children: Vec<BoxedIter> =
            Vec::with_capacity(1 + sv.imm.len() + sv.version.levels[0].len() + levels.count());
        children.push(Box::new(sv.mem.iter()));
        for m in &sv.imm {
            children.push(Box::new(m.iter()));
        }
        for f in &sv.version.levels[0] {
            children.push(Box::new(LazyTable::new(f.clone(), fill)));
        }
        for files in sv.version.levels.iter().skip(1) {
            if !files.is_empty() {
                children.push(Box::new(LevelIterator::new(files.clone(), fill)));
            }
        }
        let merged = MergingIterator::new(sv.mem.order().clone(), children);
        // Blocks read together go through the cache; a database read in place from its
        // mapping has nothing to read together, and its seeks skip looking.
        match fill && !sv.version.reads_all_in_place() {
            true => merged.reading_together(sv.version.clone()),
            false => merged,
        }
    }
}

/// A level-0 table opened on first use by an iterator.
struct LazyTable {
    file: Arc<crate::version::FileMeta>,
    fill: bool,
    it: Option<crate::sstable::TableIter>,
}

impl LazyTable {
    fn new(file: Arc<crate::version::FileMeta>, fill: bool) -> Self {
        LazyTable {
            file,
            fill,
            it: None,
        }
    }

    fn it(&mut self) -> Result<&mut crate::sstable::TableIter> {
        if self.it.is_none() {
            self.it = Some(self.file.table()?.iter(self.fill));
        }
        self.it.as_mut().ok_or(Error::Closed)
    }
}

impl crate::iter::InternalIterator for LazyTable {
    fn valid(&self) -> bool {
        self.it.as_ref().is_some_and(|i| i.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.it()?.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.it()?.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.it()?.seek(target)
    }
    fn next(&mut self) -> Result<()> {
        self.it()?.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.it()?.prev()
    }
    fn key(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |i| i.key())
    }
    fn value(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |i| i.value())
    }
}
