//! The user's view of the merged internal stream: one entry per user key, its newest version
//! visible at the read's sequence number, deletions hidden, merge operands folded, within
//! `[lower, upper)`.

use std::sync::Arc;

#[allow(unused_imports)]
use super::InternalIterator as _;
use super::{BoxedIter, LentSlice};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::key::{
    SEEK_KIND, SeqNo, ValueKind, append_internal_key, internal_key, lookup_key, parse_internal_key,
    user_key,
};
use crate::merge::MergeOperator;
use crate::range_del::Fragmented;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The inner cursor is on the current entry.
    Forward,
    /// The inner cursor is just before the current user key's entries; the entry is saved.
    Reverse,
}

pub(crate) struct DbIter {
    inner: BoxedIter,
    seq: SeqNo,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    /// Going forward, the current user key and value as the inner cursor lent them: the user
    /// reads them, and the read sampler, and the next step, each without walking down the
    /// merge, level, table and block cursors again. Set whenever `valid` is set going
    /// forward; the inner cursor moves only in this type's own `&mut` methods.
    lent_key: LentSlice,
    lent_value: LentSlice,
    merge: Option<Arc<dyn MergeOperator>>,
    /// Going forward, a key whose newest visible version is a merge operand, and its fold:
    /// `lent_key` and `lent_value` point here while it is the current entry.
    merged_key: Vec<u8>,
    merged_value: Vec<u8>,
    /// The fold read past the current key's last entry: the inner cursor is already on the
    /// next user key (or past the end), and `next` must not step it again.
    merged_ahead: bool,
    /// Operands being gathered, in the order the cursor meets them.
    operands: Vec<Vec<u8>>,
    /// The range tombstones of every memtable and table the cursor reads.
    tombstones: Vec<Arc<Fragmented>>,
    /// The order of the keys.
    order: KeyOrder,
}

#[cold]
fn not_valid() -> ! {
    // Callers must check valid() first: this is a broken precondition, not bad data.
    panic!("database iterator used while not valid")
}

fn malformed() -> Error {
    Error::corruption("", 0, "malformed internal key")
}

impl DbIter {
    pub(crate) fn new(
        inner: BoxedIter,
        seq: SeqNo,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        merge: Option<Arc<dyn MergeOperator>>,
        tombstones: Vec<Arc<Fragmented>>,
        order: KeyOrder,
    ) -> Self {
        DbIter {
            order,
            inner,
            seq,
            lower,
            upper,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            lent_key: LentSlice::EMPTY,
            lent_value: LentSlice::EMPTY,
            merge,
            merged_key: Vec::new(),
            merged_value: Vec::new(),
            merged_ahead: false,
            operands: Vec::new(),
            tombstones,
        }
    }

    /// The kind an entry has for this read: a deletion when a range tombstone that the read
    /// sees is newer than the entry.
    fn kind_seen(&self, user_key: &[u8], seq: SeqNo, kind: ValueKind) -> ValueKind {
        let hidden = self
            .tombstones
            .iter()
            .any(|t| t.covering(user_key, self.seq) > seq);
        if hidden { ValueKind::Delete } else { kind }
    }

    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    pub(crate) fn key(&self) -> &[u8] {
        match (self.valid, self.direction) {
            // SAFETY: valid going forward, so `lent_key` was lent by the inner cursor at its
            // current position (see the field), and the result borrows `self`.
            (true, Direction::Forward) => unsafe { self.lent_key.get() },
            (true, Direction::Reverse) => &self.saved_key,
            (false, _) => not_valid(),
        }
    }

    pub(crate) fn value(&self) -> &[u8] {
        match (self.valid, self.direction) {
            // SAFETY: as in `key`.
            (true, Direction::Forward) => unsafe { self.lent_value.get() },
            (true, Direction::Reverse) => &self.saved_value,
            (false, _) => not_valid(),
        }
    }

    fn guard(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.valid = false;
        }
        r
    }

    fn past_upper(&self, key: &[u8]) -> bool {
        self.upper
            .as_deref()
            .is_some_and(|u| self.order.user(key, u).is_ge())
    }

    fn before_lower(&self, key: &[u8]) -> bool {
        self.lower
            .as_deref()
            .is_some_and(|l| self.order.user(key, l).is_lt())
    }

    /// Moves forward to the newest visible, not deleted version of a user key; with
    /// `skipping`, user keys up to `saved_key` are passed over.
    fn find_next_user_entry(&mut self, mut skipping: bool) -> Result<()> {
        while self.inner.valid() {
            let p = parse_internal_key(self.inner.key()).ok_or_else(malformed)?;
            if self.past_upper(p.user_key) {
                break;
            }
            if p.seq <= self.seq {
                match self.kind_seen(p.user_key, p.seq, p.kind) {
                    ValueKind::Delete | ValueKind::RangeDelete => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        skipping = true;
                    }
                    ValueKind::Value => {
                        if !(skipping && self.order.user(p.user_key, &self.saved_key).is_le()) {
                            self.lent_key = LentSlice::new(p.user_key);
                            self.lent_value = LentSlice::new(self.inner.value());
                            self.valid = true;
                            self.saved_key.clear();
                            return Ok(());
                        }
                    }
                    ValueKind::Merge => {
                        if !(skipping && self.order.user(p.user_key, &self.saved_key).is_le()) {
                            return self.fold_forward();
                        }
                    }
                }
            }
            self.inner.next()?;
        }
        self.valid = false;
        self.saved_key.clear();
        Ok(())
    }

    /// With the inner cursor on the newest visible version of a key, a merge operand: gathers
    /// the operands after it down to a value or a deletion of the key (the cursor stays on
    /// that entry) or to the key's last entry (the cursor goes past it), and makes the fold
    /// the current entry.
    fn fold_forward(&mut self) -> Result<()> {
        self.merged_key.clear();
        self.merged_key
            .extend_from_slice(user_key(self.inner.key()));
        self.operands.clear();
        let mut base = None;
        let mut on_base = false;
        while self.inner.valid() {
            let p = parse_internal_key(self.inner.key()).ok_or_else(malformed)?;
            if p.user_key != self.merged_key.as_slice() {
                break;
            }
            // Versions of one key run newest first from the visible one: all are visible.
            match self.kind_seen(p.user_key, p.seq, p.kind) {
                ValueKind::Merge => self.operands.push(self.inner.value().to_vec()),
                ValueKind::Value => {
                    base = Some(self.inner.value());
                    on_base = true;
                    break;
                }
                ValueKind::Delete | ValueKind::RangeDelete => {
                    on_base = true;
                    break;
                }
            }
            self.inner.next()?;
        }
        self.merged_value = crate::merge::fold(
            self.merge.as_deref(),
            &self.merged_key,
            base,
            self.operands.iter().map(Vec::as_slice),
        )?;
        self.merged_ahead = !on_base;
        self.lent_key = LentSlice::new(&self.merged_key);
        self.lent_value = LentSlice::new(&self.merged_value);
        self.valid = true;
        self.saved_key.clear();
        Ok(())
    }

    /// Moves backward collecting the newest visible version of the previous user key.
    fn find_prev_user_entry(&mut self) -> Result<()> {
        self.merged_ahead = false;
        // `Delete` while nothing of the key is seen yet, or its newest version so far is a
        // deletion; operands newer than the newest value or deletion, oldest first.
        let mut kind = ValueKind::Delete;
        let mut has_base = false;
        self.operands.clear();
        while self.inner.valid() {
            let p = parse_internal_key(self.inner.key()).ok_or_else(malformed)?;
            if p.seq <= self.seq {
                if kind != ValueKind::Delete && self.order.user(p.user_key, &self.saved_key).is_lt()
                {
                    break;
                }
                if self.before_lower(p.user_key) {
                    // Everything further back is out of range.
                    break;
                }
                kind = self.kind_seen(p.user_key, p.seq, p.kind);
                self.saved_key.clear();
                self.saved_key.extend_from_slice(p.user_key);
                match kind {
                    ValueKind::Merge => self.operands.push(self.inner.value().to_vec()),
                    ValueKind::Value => {
                        self.saved_value.clear();
                        self.saved_value.extend_from_slice(self.inner.value());
                        self.operands.clear();
                        has_base = true;
                    }
                    ValueKind::Delete | ValueKind::RangeDelete => {
                        kind = ValueKind::Delete;
                        self.saved_value.clear();
                        self.operands.clear();
                        has_base = false;
                    }
                }
            }
            self.inner.prev()?;
        }
        if kind == ValueKind::Delete {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            if !self.operands.is_empty() {
                self.saved_value = crate::merge::fold(
                    self.merge.as_deref(),
                    &self.saved_key,
                    has_base.then_some(self.saved_value.as_slice()),
                    self.operands.iter().rev().map(Vec::as_slice),
                )?;
            }
            self.valid = true;
        }
        Ok(())
    }

    pub(crate) fn seek(&mut self, target: &[u8]) -> Result<()> {
        let target = match &self.lower {
            Some(l) if self.order.user(target, l).is_lt() => l.as_slice(),
            _ => target,
        };
        // The lookup key is built in `saved_key`, which the seek leaves cleared: a seek
        // allocates nothing once the cursor has seen a key as long.
        self.saved_key.clear();
        append_internal_key(&mut self.saved_key, target, self.seq, SEEK_KIND);
        self.direction = Direction::Forward;
        self.merged_ahead = false;
        let r = self.inner.seek(&self.saved_key);
        self.saved_key.clear();
        let r = r.and_then(|()| self.find_next_user_entry(false));
        self.guard(r)
    }

    pub(crate) fn seek_to_first(&mut self) -> Result<()> {
        match self.lower.clone() {
            Some(l) => self.seek(&l),
            None => {
                self.direction = Direction::Forward;
                self.merged_ahead = false;
                self.saved_key.clear();
                let r = self
                    .inner
                    .seek_to_first()
                    .and_then(|()| self.find_next_user_entry(false));
                self.guard(r)
            }
        }
    }

    /// Positions on the last key at or before `target`.
    pub(crate) fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let r = self.position_before(&internal_key(target, SeqNo(0), ValueKind::Delete));
        self.guard(r)
    }

    pub(crate) fn seek_to_last(&mut self) -> Result<()> {
        let r = match self.upper.clone() {
            Some(u) => self.position_before(&lookup_key(&u, SeqNo::MAX)),
            None => {
                self.direction = Direction::Reverse;
                self.inner
                    .seek_to_last()
                    .and_then(|()| self.find_prev_user_entry())
            }
        };
        self.guard(r)
    }

    /// Puts the inner cursor on the last entry before the internal key `ikey` and finds the
    /// user entry there, honouring the upper bound.
    fn position_before(&mut self, ikey: &[u8]) -> Result<()> {
        let ikey = match &self.upper {
            Some(u) if self.order.user(user_key(ikey), u).is_ge() => lookup_key(u, SeqNo::MAX),
            _ => ikey.to_vec(),
        };
        self.direction = Direction::Reverse;
        self.inner.seek(&ikey)?;
        if self.inner.valid() {
            self.inner.prev()?;
        } else {
            self.inner.seek_to_last()?;
        }
        self.find_prev_user_entry()
    }

    pub(crate) fn next(&mut self) -> Result<()> {
        debug_assert!(self.valid);
        let r = self.next_inner();
        self.guard(r)
    }

    fn next_inner(&mut self) -> Result<()> {
        if self.direction == Direction::Reverse {
            self.direction = Direction::Forward;
            // The inner cursor is before this key's entries: step into them, then skip them.
            if self.inner.valid() {
                self.inner.next()?;
            } else {
                self.inner.seek_to_first()?;
            }
        } else {
            if !self.valid {
                not_valid();
            }
            // SAFETY: valid going forward, as in `key`; the inner cursor moves only below.
            let key = unsafe { self.lent_key.get() };
            self.saved_key.clear();
            self.saved_key.extend_from_slice(key);
            if self.merged_ahead {
                // The fold left the cursor on the next key already.
                self.merged_ahead = false;
            } else {
                self.inner.next()?;
            }
        }
        self.find_next_user_entry(true)
    }

    pub(crate) fn prev(&mut self) -> Result<()> {
        debug_assert!(self.valid);
        let r = self.prev_inner();
        self.guard(r)
    }

    fn prev_inner(&mut self) -> Result<()> {
        if self.direction == Direction::Forward {
            // Step back past every entry of the current user key.
            self.saved_key.clear();
            if self.merged_ahead {
                // The cursor is on a later key, or past the end.
                self.merged_ahead = false;
                self.saved_key.extend_from_slice(&self.merged_key);
                if !self.inner.valid() {
                    self.inner.seek_to_last()?;
                }
            } else {
                self.saved_key.extend_from_slice(user_key(self.inner.key()));
                self.inner.prev()?;
            }
            loop {
                if !self.inner.valid() {
                    self.valid = false;
                    self.saved_key.clear();
                    self.saved_value.clear();
                    return Ok(());
                }
                if self
                    .order
                    .user(user_key(self.inner.key()), &self.saved_key)
                    .is_lt()
                {
                    break;
                }
                self.inner.prev()?;
            }
            self.direction = Direction::Reverse;
        }
        self.find_prev_user_entry()
    }
}
