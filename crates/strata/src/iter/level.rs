//! A cursor over one sorted level: the files are visited in key order, each opened only when
//! the cursor reaches it.

use std::sync::Arc;

use super::InternalIterator;
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::sstable::TableIter;
use crate::version::FileMeta;

pub(crate) struct LevelIterator {
    files: Vec<Arc<FileMeta>>,
    index: usize,
    current: Option<TableIter>,
    fill_cache: bool,
    /// The order of the files' keys.
    order: KeyOrder,
}

impl LevelIterator {
    pub(crate) fn new(files: Vec<Arc<FileMeta>>, fill_cache: bool) -> Self {
        LevelIterator {
            order: files
                .first()
                .map_or(KeyOrder::Bytewise, |f| f.order().clone()),
            files,
            index: 0,
            current: None,
            fill_cache,
        }
    }

    fn open(&mut self, index: usize) -> Result<bool> {
        self.index = index;
        self.current = None;
        let Some(f) = self.files.get(index) else {
            return Ok(false);
        };
        self.current = Some(f.table()?.iter(self.fill_cache));
        Ok(true)
    }

    fn skip_forward(&mut self) -> Result<()> {
        while self.current.as_ref().is_some_and(|c| !c.valid()) {
            if !self.open(self.index + 1)? {
                return Ok(());
            }
            if let Some(c) = &mut self.current {
                c.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn skip_backward(&mut self) -> Result<()> {
        while self.current.as_ref().is_some_and(|c| !c.valid()) {
            if self.index == 0 {
                self.current = None;
                return Ok(());
            }
            self.open(self.index - 1)?;
            if let Some(c) = &mut self.current {
                c.seek_to_last()?;
            }
        }
        Ok(())
    }

    fn cur(&self) -> &TableIter {
        debug_assert!(self.valid());
        match &self.current {
            Some(c) => c,
            None => panic!("level iterator used while not valid"),
        }
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        if self.open(0)?
            && let Some(c) = &mut self.current
        {
            c.seek_to_first()?;
        }
        self.skip_forward()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        if self.files.is_empty() {
            self.current = None;
            return Ok(());
        }
        self.open(self.files.len() - 1)?;
        if let Some(c) = &mut self.current {
            c.seek_to_last()?;
        }
        self.skip_backward()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self
            .files
            .partition_point(|f| self.order.internal(&f.largest, target).is_lt());
        if self.open(i)?
            && let Some(c) = &mut self.current
        {
            c.seek(target)?;
        }
        self.skip_forward()
    }
    fn next(&mut self) -> Result<()> {
        if let Some(c) = &mut self.current {
            c.next()?;
        }
        self.skip_forward()
    }
    fn prev(&mut self) -> Result<()> {
        if let Some(c) = &mut self.current {
            c.prev()?;
        }
        self.skip_backward()
    }
    fn key(&self) -> &[u8] {
        self.cur().key()
    }
    fn value(&self) -> &[u8] {
        self.cur().value()
    }
}
