//! A cursor over a table's entries, both ways.

use std::sync::Arc;

use super::block::{Block, BlockIter};
use super::format::BlockHandle;
use super::reader::Table;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;

impl Table {
    /// A cursor over every entry of the table.
    pub(crate) fn iter(self: &Arc<Self>, fill_cache: bool) -> TableIter {
        TableIter {
            table: self.clone(),
            fill_cache,
            root: None,
            stack: Vec::new(),
            data: None,
        }
    }
}

/// A cursor over a table: a stack of index cursors from the root down, then a data block.
pub(crate) struct TableIter {
    table: Arc<Table>,
    fill_cache: bool,
    /// The root block of the index, kept from the first seek for the cursor's next ones.
    root: Option<Arc<Block>>,
    /// One cursor per index level, root first, with the offset of its block.
    stack: Vec<(BlockIter, u64)>,
    data: Option<(BlockIter, u64)>,
}

#[derive(Clone, Copy)]
enum Edge {
    First,
    Last,
}

impl TableIter {
    fn err(&self, e: Error, offset: u64) -> Error {
        self.table.with_path(e, offset)
    }

    /// Opens the block `handle_bytes` names: an index block below the root (`index`), read
    /// as metadata, the same block a lookup reads, or a data block.
    fn open_block(
        &self,
        handle_bytes: &[u8],
        at: u64,
        in_order: bool,
        index: bool,
    ) -> Result<(BlockIter, u64)> {
        let handle =
            BlockHandle::decode_varint(handle_bytes).map_err(|e| e.at(&self.table.path, at))?;
        let block = if index {
            self.table.read_meta_block(handle, self.fill_cache)?
        } else {
            self.table
                .read_block_in(handle, self.fill_cache, in_order)?
        };
        Ok((block.iter(self.table.block_order()), handle.offset))
    }

    /// Rebuilds the cursors below index level `level` (whose cursor is positioned) down to the
    /// data block, each placed at `edge`. `in_order` when a scan steps there from the block
    /// before (or after).
    fn descend(&mut self, from: usize, edge: Edge, in_order: bool) -> Result<()> {
        self.stack.truncate(from + 1);
        self.data = None;
        loop {
            let Some((top, at)) = self.stack.last() else {
                return Ok(());
            };
            if !top.valid() {
                return Ok(());
            }
            let index = self.stack.len() < usize::from(self.table.footer.index_depth);
            let (mut child, off) = self.open_block(top.value(), *at, in_order, index)?;
            let r = match edge {
                Edge::First => child.seek_to_first(),
                Edge::Last => child.seek_to_last(),
            };
            r.map_err(|e| self.err(e, off))?;
            if self.stack.len() == usize::from(self.table.footer.index_depth) {
                self.data = Some((child, off));
                return Ok(());
            }
            self.stack.push((child, off));
        }
    }

    /// A cursor over the root block of the index. The first seek takes the table's pinned
    /// one; a cursor that does not fill the cache (a compaction's) reads one for itself
    /// rather than pin it, unless the table holds it already. Later seeks reuse it.
    fn root(&mut self) -> Result<(BlockIter, u64)> {
        let offset = self.table.footer.index.offset;
        if let Some(root) = &self.root {
            return Ok((root.iter(self.table.block_order()), offset));
        }
        let root = if self.fill_cache {
            self.table.index()?.block.clone()
        } else {
            match self.table.index.load().as_deref() {
                Some(r) => r.block.clone(),
                None => Arc::new(self.table.read_index_root(self.table.footer.index)?),
            }
        };
        let it = root.iter(self.table.block_order());
        self.root = Some(root);
        Ok((it, offset))
    }

    /// After the data cursor ran off one end, moves to the neighbouring data block.
    fn skip_empty(&mut self, forward: bool) -> Result<()> {
        while self.data.as_ref().is_some_and(|(d, _)| !d.valid()) {
            // Find the deepest index level that can still move.
            let mut level = self.stack.len();
            loop {
                if level == 0 {
                    self.data = None;
                    return Ok(());
                }
                level -= 1;
                let Some((it, off)) = self.stack.get_mut(level) else {
                    return Ok(());
                };
                let off = *off;
                let r = if forward { it.next() } else { it.prev() };
                let valid = it.valid();
                r.map_err(|e| self.table.with_path(e, off))?;
                if valid {
                    break;
                }
            }
            self.descend(level, if forward { Edge::First } else { Edge::Last }, true)?;
        }
        Ok(())
    }

    fn data(&self) -> &BlockIter {
        debug_assert!(self.valid());
        match &self.data {
            Some((d, _)) => d,
            None => unreachable_iter(),
        }
    }
}

#[cold]
fn unreachable_iter() -> ! {
    // Callers must check valid() first: this is a broken precondition, not bad data.
    panic!("table iterator used while not valid")
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(|(d, _)| d.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let (mut root, off) = self.root()?;
        root.seek_to_first().map_err(|e| self.err(e, off))?;
        self.stack = vec![(root, off)];
        self.descend(0, Edge::First, true)?;
        self.skip_empty(true)
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let (mut root, off) = self.root()?;
        root.seek_to_last().map_err(|e| self.err(e, off))?;
        self.stack = vec![(root, off)];
        self.descend(0, Edge::Last, true)?;
        self.skip_empty(false)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let (mut it, mut off) = self.root()?;
        self.stack.clear();
        self.data = None;
        loop {
            it.seek(target).map_err(|e| self.err(e, off))?;
            if !it.valid() {
                return Ok(());
            }
            let index = self.stack.len() + 1 < usize::from(self.table.footer.index_depth);
            let (child, child_off) = self.open_block(it.value(), off, false, index)?;
            self.stack.push((it, off));
            if self.stack.len() == usize::from(self.table.footer.index_depth) {
                let mut d = child;
                d.seek(target).map_err(|e| self.err(e, child_off))?;
                self.data = Some((d, child_off));
                return self.skip_empty(true);
            }
            it = child;
            off = child_off;
        }
    }
    fn next(&mut self) -> Result<()> {
        if let Some((d, off)) = &mut self.data {
            let off = *off;
            d.next().map_err(|e| self.table.with_path(e, off))?;
        }
        self.skip_empty(true)
    }
    fn prev(&mut self) -> Result<()> {
        if let Some((d, off)) = &mut self.data {
            let off = *off;
            d.prev().map_err(|e| self.table.with_path(e, off))?;
        }
        self.skip_empty(false)
    }
    fn key(&self) -> &[u8] {
        self.data().key()
    }
    fn value(&self) -> &[u8] {
        self.data().value()
    }
}
