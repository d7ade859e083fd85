//! Merges several sorted cursors into one. Children are ordered newest source first; the
//! merge works in both directions, re-seeking the other children when the direction changes.
//!
//! The valid children form a binary heap, smallest key on top going forward and largest in
//! reverse. A step moves the top child and sifts it down, which takes two comparisons when it
//! stays on top, as it does through long runs of keys from one level; scanning every child for
//! the smallest took one comparison per child per step. The heap remembers which child of
//! the top is above the other while neither moves, so a step that leaves the top child on
//! top takes one comparison.
//!
//! Each heap entry holds its child's key as the child lent it at its last movement, so
//! comparisons and the merge's own `key` read it without a call down that child's cursors.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{BoxedIter, InternalIterator, LentSlice};
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::version::Version;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// A valid child in the heap, with its key as it lent it at its current position. The key
/// is renewed at every movement of the child, before the heap looks at it again.
#[derive(Clone, Copy)]
struct Entry {
    child: usize,
    key: LentSlice,
}

pub(crate) struct MergingIterator {
    children: Vec<BoxedIter>,
    /// The valid children, a heap ordered by [`MergingIterator::above`].
    heap: Vec<Entry>,
    direction: Direction,
    /// Which of heap slots 1 and 2 is above the other, when known; forgotten whenever either
    /// slot changes.
    runner_up: Option<usize>,
    /// The tables of the children, when a seek should read the blocks they land in together
    /// before it positions them ([`MergingIterator::reading_together`]).
    tables: Option<Arc<Version>>,
    /// The order of the keys.
    order: KeyOrder,
}

impl MergingIterator {
    pub(crate) fn new(order: KeyOrder, children: Vec<BoxedIter>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator {
            order,
            children,
            heap,
            direction: Direction::Forward,
            runner_up: None,
            tables: None,
        }
    }

    /// Seeks read the data blocks they land in from `version`'s tables (its level-0 tables
    /// and levels being among the children) all together, and then position the children:
    /// beyond memory each child's seek would otherwise wait for its own read from the
    /// device in turn, where the device serves many at once.
    pub(crate) fn reading_together(self, version: Arc<Version>) -> Self {
        MergingIterator {
            tables: Some(version),
            ..self
        }
    }

    /// True when the child in heap slot `a` belongs above the one in slot `b`: its key comes
    /// first in the direction of travel. Equal keys (never expected) go to the newer source
    /// going forward.
    fn above(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.heap[a], &self.heap[b]);
        // SAFETY: the children in the heap lent their keys at their current positions (see
        // `Entry`), and they move only through `&mut self`.
        let (ka, kb) = unsafe { (a.key.get(), b.key.get()) };
        let o = self.order.internal(ka, kb).then(a.child.cmp(&b.child));
        match self.direction {
            Direction::Forward => o == Ordering::Less,
            Direction::Reverse => o == Ordering::Greater,
        }
    }

    /// Child `child`'s heap entry at its current position; `None` when it is not valid.
    fn entry(&self, child: usize) -> Option<Entry> {
        let c = &self.children[child];
        c.valid().then(|| Entry {
            child,
            key: LentSlice::new(c.key()),
        })
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut top = i;
            if l < self.heap.len() && self.above(l, top) {
                top = l;
            }
            if r < self.heap.len() && self.above(r, top) {
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
        self.runner_up = None;
        self.heap.clear();
        for child in 0..self.children.len() {
            if let Some(e) = self.entry(child) {
                self.heap.push(e);
            }
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// After the top child moved: back into place, or out of the heap when exhausted.
    fn settle_top(&mut self) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        match self.entry(top.child) {
            Some(e) => self.heap[0] = e,
            None => {
                self.heap.swap_remove(0);
                self.runner_up = None;
            }
        }
        let second = match self.heap.len() {
            0 | 1 => return,
            2 => 1,
            _ => match self.runner_up {
                Some(s) => s,
                None => {
                    let s = if self.above(2, 1) { 2 } else { 1 };
                    self.runner_up = Some(s);
                    s
                }
            },
        };
        if self.above(0, second) {
            return;
        }
        self.heap.swap(0, second);
        self.runner_up = None;
        self.sift_down(second);
    }

    /// Positions every child with `position`, then rebuilds the heap for `direction`.
    fn position_all(
        &mut self,
        direction: Direction,
        mut position: impl FnMut(&mut BoxedIter) -> Result<()>,
    ) -> Result<()> {
        self.heap.clear();
        self.runner_up = None;
        for c in &mut self.children {
            position(c)?;
        }
        self.rebuild(direction);
        Ok(())
    }

    fn cur(&self) -> &BoxedIter {
        debug_assert!(self.valid());
        &self.children[self.heap.first().map_or(0, |e| e.child)]
    }

    /// Moves the top child by `step`, leaving the cursor invalid if it fails.
    fn step_top(&mut self, step: fn(&mut BoxedIter) -> Result<()>) -> Result<()> {
        let top = self.heap[0].child;
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
        // The seeks below find the blocks read here in the cache.
        if let Some(v) = &self.tables {
            crate::version::read_together(&v.blocks_for_seek(target));
        }
        self.position_all(Direction::Forward, |c| c.seek(target))
    }
    fn next(&mut self) -> Result<()> {
        let Some(cur) = self.heap.first().map(|e| e.child) else {
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
                if c.valid() && self.order.internal(&key, c.key()) == Ordering::Equal {
                    c.next()?;
                }
            }
            // The current child's key is below every other child's: it is on top again.
            self.rebuild(Direction::Forward);
            debug_assert_eq!(self.heap.first().map(|e| e.child), Some(cur));
        }
        self.step_top(|c| c.next())
    }
    fn prev(&mut self) -> Result<()> {
        let Some(cur) = self.heap.first().map(|e| e.child) else {
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
                // An entry added to a memtable after the seek may sit between the entry found
                // and `key`; step past it (it is newer than this cursor's reads, so hidden).
                // Otherwise it would top the heap, and the current child would not move.
                while c.valid() && self.order.internal(c.key(), &key) != Ordering::Less {
                    c.prev()?;
                }
            }
            self.rebuild(Direction::Reverse);
            debug_assert_eq!(self.heap.first().map(|e| e.child), Some(cur));
        }
        self.step_top(|c| c.prev())
    }
    fn key(&self) -> &[u8] {
        match self.heap.first() {
            // SAFETY: as in `above`; the result borrows `self`.
            Some(top) => unsafe { top.key.get() },
            None => not_valid(),
        }
    }
    fn value(&self) -> &[u8] {
        self.cur().value()
    }
}

#[cold]
fn not_valid() -> ! {
    // Callers must check valid() first: this is a broken precondition, not bad data.
    panic!("merging iterator used while not valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{SeqNo, ValueKind, internal_key};

    /// A sorted list of internal keys; `prev` can first gain an entry just before the
    /// current one, as a memtable gains entries from a concurrent writer.
    struct ListIter {
        keys: Vec<Vec<u8>>,
        pos: usize,
        gain_before_prev: Option<Vec<u8>>,
    }

    impl InternalIterator for ListIter {
        fn valid(&self) -> bool {
            self.pos < self.keys.len()
        }
        fn seek_to_first(&mut self) -> Result<()> {
            self.pos = 0;
            Ok(())
        }
        fn seek_to_last(&mut self) -> Result<()> {
            self.pos = self.keys.len().checked_sub(1).unwrap_or(self.keys.len());
            Ok(())
        }
        fn seek(&mut self, target: &[u8]) -> Result<()> {
            self.pos = self
                .keys
                .partition_point(|k| KeyOrder::Bytewise.internal(k, target).is_lt());
            Ok(())
        }
        fn next(&mut self) -> Result<()> {
            self.pos += 1;
            Ok(())
        }
        fn prev(&mut self) -> Result<()> {
            if let Some(k) = self.gain_before_prev.take() {
                // Lands between the previous entry and the current one: the cursor steps
                // onto it.
                self.keys.insert(self.pos, k);
                return Ok(());
            }
            self.pos = self.pos.checked_sub(1).unwrap_or(self.keys.len());
            Ok(())
        }
        fn key(&self) -> &[u8] {
            &self.keys[self.pos]
        }
        fn value(&self) -> &[u8] {
            b""
        }
    }

    fn k(user: &str, seq: u64) -> Vec<u8> {
        internal_key(user.as_bytes(), SeqNo(seq), ValueKind::Value)
    }

    /// Three children whose keys interleave: every step in either direction, and every turn,
    /// yields the merged order, read through the keys the heap keeps for each child.
    #[test]
    fn merges_interleaved_children_in_both_directions() {
        let lists: [&[&str]; 3] = [
            &["a", "d", "g", "j"],
            &["b", "e", "h"],
            &["c", "f", "i", "k"],
        ];
        let children: Vec<BoxedIter> = lists
            .iter()
            .map(|l| {
                Box::new(ListIter {
                    keys: l.iter().map(|u| k(u, 1)).collect(),
                    pos: 0,
                    gain_before_prev: None,
                }) as BoxedIter
            })
            .collect();
        let all: Vec<Vec<u8>> = "abcdefghijk"
            .chars()
            .map(|c| k(&c.to_string(), 1))
            .collect();
        let mut it = MergingIterator::new(KeyOrder::Bytewise, children);
        it.seek_to_first().unwrap();
        for want in &all {
            assert_eq!(it.key(), want.as_slice());
            it.next().unwrap();
        }
        assert!(!it.valid());
        it.seek_to_last().unwrap();
        for want in all.iter().rev() {
            assert_eq!(it.key(), want.as_slice());
            it.prev().unwrap();
        }
        assert!(!it.valid());
        // Turns in both directions, each step checked.
        it.seek(&k("c", 1)).unwrap();
        assert_eq!(it.key(), k("c", 1).as_slice());
        let moves = [
            (true, "d"),
            (true, "e"),
            (false, "d"),
            (false, "c"),
            (false, "b"),
            (true, "c"),
            (true, "d"),
            (true, "e"),
            (true, "f"),
        ];
        for (forward, want) in moves {
            if forward { it.next() } else { it.prev() }.unwrap();
            assert_eq!(it.key(), k(want, 1).as_slice());
        }
    }

    /// Regression: turning back from a forward position, another child re-sought to the
    /// current key gained an entry after it (a concurrent write to the memtable). That entry
    /// topped the heap, the current child did not move, and a reverse scan bounded above
    /// returned the bound itself (found by the multi-threaded stress test).
    #[test]
    fn turning_back_moves_the_current_child_even_when_another_gains_an_entry() {
        let current = ListIter {
            keys: vec![k("a", 1), k("k", 1)],
            pos: 0,
            gain_before_prev: None,
        };
        let growing = ListIter {
            keys: vec![k("z", 1)],
            pos: 0,
            gain_before_prev: Some(k("m", 9)),
        };
        let mut it = MergingIterator::new(
            KeyOrder::Bytewise,
            vec![Box::new(current), Box::new(growing)],
        );
        it.seek(&k("k", 1)).unwrap();
        assert_eq!(it.key(), k("k", 1).as_slice());
        it.prev().unwrap();
        assert_eq!(it.key(), k("a", 1).as_slice());
        it.prev().unwrap();
        assert!(!it.valid());
    }
}
