//! Merges several sorted cursors into one. Children are ordered newest source first; the
//! merge works in both directions, re-seeking the other children when the direction changes.

use std::cmp::Ordering;

use super::{BoxedIter, InternalIterator};
use crate::error::Result;
use crate::key::compare_internal;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

pub(crate) struct MergingIterator {
    children: Vec<BoxedIter>,
    current: Option<usize>,
    direction: Direction,
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<BoxedIter>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
        }
    }

    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b) if compare_internal(c.key(), self.children[b].key()) != Ordering::Less => {
                    Some(b)
                }
                _ => Some(i),
            };
        }
        self.current = best;
    }

    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b)
                    if compare_internal(c.key(), self.children[b].key()) != Ordering::Greater =>
                {
                    Some(b)
                }
                _ => Some(i),
            };
        }
        self.current = best;
    }

    fn cur(&self) -> &BoxedIter {
        debug_assert!(self.valid());
        &self.children[self.current.unwrap_or_default()]
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.current = None;
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.direction = Direction::Forward;
        self.find_smallest();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.current = None;
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.direction = Direction::Reverse;
        self.find_largest();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.current = None;
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.direction = Direction::Forward;
        self.find_smallest();
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        if self.direction != Direction::Forward {
            // Every other child must move to the first entry after the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key)?;
                if c.valid() && compare_internal(&key, c.key()) == Ordering::Equal {
                    c.next()?;
                }
            }
            self.direction = Direction::Forward;
        }
        self.current = None;
        self.children[cur].next()?;
        self.find_smallest();
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        if self.direction != Direction::Reverse {
            // Every other child must move to the last entry before the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key)?;
                if c.valid() {
                    c.prev()?;
                } else {
                    c.seek_to_last()?;
                }
            }
            self.direction = Direction::Reverse;
        }
        self.current = None;
        self.children[cur].prev()?;
        self.find_largest();
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.cur().key()
    }
    fn value(&self) -> &[u8] {
        self.cur().value()
    }
}
