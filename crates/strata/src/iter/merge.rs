//! Merges several sorted cursors into one. Children are ordered newest source first; the
//! merge works in both directions, re-seeking the other children when the direction changes.
//!
//! The valid children form a binary heap, smallest key on top going forward and largest in
//! reverse. A step moves the top child and sifts it down, which takes two comparisons when it
//! stays on top, as it does through long runs of keys from one level; scanning every child for
//! the smallest took one comparison per child per step.

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
    /// Indexes of the valid children, a heap ordered by [`MergingIterator::above`].
    heap: Vec<usize>,
    direction: Direction,
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<BoxedIter>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator {
            children,
            heap,
            direction: Direction::Forward,
        }
    }

    /// True when child `a` belongs above child `b`: its key comes first in the direction of
    /// travel. Equal keys (never expected) go to the newer source going forward.
    fn above(&self, a: usize, b: usize) -> bool {
        let o = compare_internal(self.children[a].key(), self.children[b].key()).then(a.cmp(&b));
        match self.direction {
            Direction::Forward => o == Ordering::Less,
            Direction::Reverse => o == Ordering::Greater,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut top = i;
            if l < self.heap.len() && self.above(self.heap[l], self.heap[top]) {
                top = l;
            }
            if r < self.heap.len() && self.above(self.heap[r], self.heap[top]) {
                top = r;
            }
            if top == i {
                return;
            }
            self.heap.swap(i, top);
            i = top;
        }
    }

    /// Rebuilds the heap from the children's positions.
    fn rebuild(&mut self, direction: Direction) {
        self.direction = direction;
        self.heap.clear();
        self.heap
            .extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// After the top child moved: back into place, or out of the heap when exhausted.
    fn settle_top(&mut self) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        if !self.children[top].valid() {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
    }

    /// Positions every child with `position`, then rebuilds the heap for `direction`.
    fn position_all(
        &mut self,
        direction: Direction,
        mut position: impl FnMut(&mut BoxedIter) -> Result<()>,
    ) -> Result<()> {
        self.heap.clear();
        for c in &mut self.children {
            position(c)?;
        }
        self.rebuild(direction);
        Ok(())
    }

    fn cur(&self) -> &BoxedIter {
        debug_assert!(self.valid());
        &self.children[self.heap.first().copied().unwrap_or_default()]
    }

    /// Moves the top child by `step`, leaving the cursor invalid if it fails.
    fn step_top(&mut self, step: fn(&mut BoxedIter) -> Result<()>) -> Result<()> {
        let top = self.heap[0];
        if let Err(e) = step(&mut self.children[top]) {
            self.heap.clear();
            return Err(e);
        }
        self.settle_top();
        Ok(())
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.position_all(Direction::Forward, |c| c.seek_to_first())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.position_all(Direction::Reverse, |c| c.seek_to_last())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.position_all(Direction::Forward, |c| c.seek(target))
    }
    fn next(&mut self) -> Result<()> {
        let Some(&cur) = self.heap.first() else {
            return Ok(());
        };
        if self.direction != Direction::Forward {
            // Every other child must move to the first entry after the current key.
            let key = self.children[cur].key().to_vec();
            self.heap.clear();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key)?;
                if c.valid() && compare_internal(&key, c.key()) == Ordering::Equal {
                    c.next()?;
                }
            }
            // The current child's key is below every other child's: it is on top again.
            self.rebuild(Direction::Forward);
        }
        self.step_top(|c| c.next())
    }
    fn prev(&mut self) -> Result<()> {
        let Some(&cur) = self.heap.first() else {
            return Ok(());
        };
        if self.direction != Direction::Reverse {
            // Every other child must move to the last entry before the current key.
            let key = self.children[cur].key().to_vec();
            self.heap.clear();
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
            self.rebuild(Direction::Reverse);
        }
        self.step_top(|c| c.prev())
    }
    fn key(&self) -> &[u8] {
        self.cur().key()
    }
    fn value(&self) -> &[u8] {
        self.cur().value()
    }
}
