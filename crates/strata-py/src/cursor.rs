//! The cursor behind a Python `Iterator`: plyvel's model, where the cursor sits between two
//! entries, `next()` gives the one after it and `prev()` the one before, over the engine's
//! `DbIterator`, which sits on an entry.

use std::collections::VecDeque;
use std::sync::Arc;

use strata::{BytewiseComparator, Comparator, DbIterator, ReverseBytewiseComparator};

/// The key range of an iterator: an inclusive lower bound and an exclusive upper bound, as
/// the engine's read options take them, and what the cursor itself leaves out besides.
pub(crate) struct Bounds {
    pub lower: Option<Vec<u8>>,
    pub upper: Option<Vec<u8>>,
    pub ends: Ends,
}

/// The ends of a range that the engine's bounds cannot say in an order other than bytewise,
/// where no key is known to come right after another: an excluded start, an included stop.
pub(crate) struct Ends {
    skip: Option<Vec<u8>>,
    through: Option<Vec<u8>>,
    order: Arc<dyn Comparator>,
}

impl Bounds {
    /// The bounds of `start`/`stop` (each inclusive or not) or of a `prefix`, in `order`.
    /// A prefix covers `[prefix, the prefix with its last byte raised)` in `order`, as
    /// plyvel's does: in byte order, the keys that begin with it.
    /// A comparator under a built-in name orders as the built-in does, as in the engine.
    pub fn new(
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        (include_start, include_stop): (bool, bool),
        order: &Arc<dyn Comparator>,
    ) -> Result<Bounds, &'static str> {
        let order: Arc<dyn Comparator> = match order.name() {
            ReverseBytewiseComparator::NAME => Arc::new(ReverseBytewiseComparator),
            _ => order.clone(),
        };
        let mut ends = Ends {
            skip: None,
            through: None,
            order,
        };
        if let Some(prefix) = prefix {
            if start.is_some() || stop.is_some() {
                return Err("prefix cannot be combined with start or stop");
            }
            return Ok(Bounds {
                upper: prefix_end(&prefix),
                lower: Some(prefix),
                ends,
            });
        }
        // The smallest key after `k`, in byte order.
        let after = |mut k: Vec<u8>| {
            k.push(0);
            k
        };
        if ends.order.name() == BytewiseComparator::NAME {
            return Ok(Bounds {
                lower: start.map(|s| if include_start { s } else { after(s) }),
                upper: stop.map(|s| if include_stop { after(s) } else { s }),
                ends,
            });
        }
        ends.skip = start.clone().filter(|_| !include_start);
        ends.through = stop.clone().filter(|_| include_stop);
        Ok(Bounds {
            lower: start,
            upper: stop.filter(|_| !include_stop),
            ends,
        })
    }
}

impl Ends {
    /// Whether the engine's iterator, after a movement, is on a key of the range: not past
    /// it, and not on an excluded start (stepped over going `forward`, the end going back).
    fn holds(&self, it: &mut DbIterator, forward: bool) -> strata::Result<bool> {
        if it.valid() && self.skip.as_deref() == Some(it.key()) {
            if !forward {
                return Ok(false);
            }
            it.next()?;
        }
        Ok(it.valid()
            && self
                .through
                .as_deref()
                .is_none_or(|t| self.order.compare(it.key(), t).is_le()))
    }
}

/// The smallest key greater than every key that begins with `prefix`, or `None` when there is
/// none (the prefix is empty or all `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// Where the cursor sits in key space. As in plyvel, the cursor is between keys whatever the
/// iterator's direction: `seek(t)` puts it just before `t`; a forward iterator's `next()`
/// gives the entry after it, a reverse iterator's the entry before it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Position {
    /// Before the first entry; the engine's iterator is not positioned.
    Start,
    /// Just before the entry the engine's iterator is on.
    Before,
    /// After the last entry.
    End,
}

/// An entry: key and value.
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

pub(crate) struct Cursor {
    /// `None` once closed.
    it: Option<DbIterator>,
    reverse: bool,
    /// Where the engine's iterator stands: past the entries read ahead, if any.
    position: Position,
    ends: Ends,
    /// Entries `next` has moved over already, for the calls after it.
    ahead: Ahead,
    /// A failure met reading ahead, after the entries before it: the call that finds none
    /// of them left, or that moves the cursor back over them, returns it.
    failed: Option<Closed>,
}

/// Entries read ahead, so that a scan moves the engine's iterator (and lets the GIL go) once
/// per run of entries rather than once per entry: their keys and values end to end in one
/// buffer, and each one's lengths.
#[derive(Default)]
struct Ahead {
    bytes: Vec<u8>,
    lengths: VecDeque<(usize, usize)>,
    /// Where the first entry in `lengths` starts in `bytes`.
    start: usize,
    /// How many entries the next run reads: one at first and after every other movement,
    /// doubling up to [`MAX_AHEAD`], so that a `next()` or two after a seek read no more
    /// than they give.
    run: usize,
}

/// Entries read ahead at most in one run.
const MAX_AHEAD: usize = 256;

/// Bytes read ahead at most in one run (one entry may exceed it).
const MAX_AHEAD_BYTES: usize = 256 << 10;

impl Ahead {
    fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Hands the first entry to `f` and drops it.
    fn pop<R>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> R) -> Option<R> {
        let (k, v) = self.lengths.pop_front()?;
        let key = self.bytes.get(self.start..self.start + k)?;
        let value = self.bytes.get(self.start + k..self.start + k + v)?;
        let r = f(key, value);
        self.start += k + v;
        Some(r)
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.lengths.push_back((key.len(), value.len()));
    }

    /// Empties the buffer (keeping its memory) for the next run, and sizes that run.
    fn begin_run(&mut self) {
        self.clear();
        self.run = (self.run * 2).clamp(1, MAX_AHEAD);
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.lengths.clear();
        self.start = 0;
    }

    /// Empties the buffer and starts the runs over from one entry.
    fn reset(&mut self) {
        self.clear();
        self.run = 0;
        // A buffer grown for large values is not kept for the iterator's life.
        if self.bytes.capacity() > 2 * MAX_AHEAD_BYTES {
            self.bytes = Vec::new();
        }
    }
}

impl Cursor {
    /// A cursor at the start of the range (its end, for a reverse iterator, which begins
    /// with the largest key).
    pub fn new(it: DbIterator, reverse: bool, ends: Ends) -> Cursor {
        Cursor {
            it: Some(it),
            reverse,
            ends,
            position: if reverse {
                Position::End
            } else {
                Position::Start
            },
            ahead: Ahead::default(),
            failed: None,
        }
    }

    /// The iterator's next entry, moving the cursor over it; `None` past the last. Reads a
    /// run of entries ahead when none is left.
    pub fn next(&mut self) -> Result<Option<Entry>, Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        if self.ahead.len() == 0 {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            self.read_ahead()?;
        }
        Ok(self.ahead.pop(|k, v| (k.to_vec(), v.to_vec())))
    }

    /// [`Cursor::next`] for an entry read ahead, handed to `f`: `None` when none is left.
    pub fn next_read_ahead<R>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> R) -> Option<R> {
        self.ahead.pop(f)
    }

    /// Moves the engine's iterator over the next run of entries, keeping them. A failure
    /// after some entries keeps those and leaves the engine's iterator at the end, as a
    /// failed movement does; the error waits in `failed`.
    fn read_ahead(&mut self) -> Result<(), Closed> {
        self.ahead.begin_run();
        let mut ahead = std::mem::take(&mut self.ahead);
        let mut result = Ok(());
        while ahead.len() < ahead.run && ahead.bytes.len() < MAX_AHEAD_BYTES {
            match self.step(false, |k, v| ahead.push(k, v)) {
                Ok(Some(())) => {}
                Ok(None) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.ahead = ahead;
        match result {
            Err(e) if self.ahead.len() == 0 => Err(e),
            Err(e) => {
                self.failed = Some(e);
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Drops the entries read ahead and puts the cursor back where the caller last saw it:
    /// just before the first of them in the order of `next`. One seek does it, wherever
    /// the engine's iterator stopped (even after a failure reading ahead, which is then
    /// dropped: the seek reads again).
    fn unread(&mut self) -> Result<(), Closed> {
        let first = self.ahead.pop(|k, _| k.to_vec());
        let failed = self.failed.take();
        self.forget_ahead();
        let Some(key) = first else {
            // Every entry before a failure was given: the failure comes now, as it would
            // have with the next `next()`, and leaves the cursor at the end.
            return failed.map_or(Ok(()), Err);
        };
        // `seek` puts the cursor just before the key, in key order: where a forward
        // iterator's `next` gives it. A reverse iterator's gives the key before the cursor,
        // so the cursor goes over it.
        self.seek(&key)?;
        if self.reverse {
            self.forward(|_, _| ())?;
        }
        Ok(())
    }

    /// The entry `next` gave last, moving the cursor back over it; `None` before the first.
    pub fn prev(&mut self) -> Result<Option<Entry>, Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        self.unread()?;
        self.step(true, |k, v| (k.to_vec(), v.to_vec()))
    }

    /// Moves the engine's iterator over one entry, in the direction of `next` or (`back`)
    /// of `prev`, and hands it to `f`.
    fn step<R>(
        &mut self,
        back: bool,
        f: impl FnOnce(&[u8], &[u8]) -> R,
    ) -> Result<Option<R>, Closed> {
        if self.reverse != back {
            self.backward(f)
        } else {
            self.forward(f)
        }
    }

    /// The entry after the cursor, moving the cursor past it.
    fn forward<R>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> R) -> Result<Option<R>, Closed> {
        let it = self.it.as_mut().ok_or(Closed::Iterator)?;
        match self.position {
            Position::End => return Ok(None),
            Position::Before => {}
            Position::Start => {
                let moved = it.seek_to_first().and_then(|()| self.ends.holds(it, true));
                settle(&mut self.position, moved, Position::End)?;
                if self.position == Position::End {
                    return Ok(None);
                }
            }
        }
        let entry = f(it.key(), it.value());
        let moved = it.next().and_then(|()| self.ends.holds(it, true));
        settle(&mut self.position, moved, Position::End)?;
        Ok(Some(entry))
    }

    /// The entry before the cursor, moving the cursor back before it.
    fn backward<R>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> R) -> Result<Option<R>, Closed> {
        let it = self.it.as_mut().ok_or(Closed::Iterator)?;
        let r = match (self.position, &self.ends.through) {
            (Position::Start, _) => return Ok(None),
            (Position::End, None) => it.seek_to_last(),
            (Position::End, Some(stop)) => it.seek_for_prev(stop),
            (Position::Before, _) => it.prev(),
        };
        let moved = r.and_then(|()| self.ends.holds(it, false));
        settle(&mut self.position, moved, Position::Start)?;
        Ok((self.position == Position::Before).then(|| f(it.key(), it.value())))
    }

    /// Places the cursor just before `target`: after every key below it.
    pub fn seek(&mut self, target: &[u8]) -> Result<(), Closed> {
        self.forget_ahead();
        let it = self.it.as_mut().ok_or(Closed::Iterator)?;
        let moved = it.seek(target).and_then(|()| self.ends.holds(it, true));
        settle(&mut self.position, moved, Position::End)
    }

    /// Places the cursor before the range's first key.
    pub fn seek_to_start(&mut self) -> Result<(), Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        self.forget_ahead();
        self.position = Position::Start;
        Ok(())
    }

    /// Places the cursor after the range's last key.
    pub fn seek_to_stop(&mut self) -> Result<(), Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        self.forget_ahead();
        self.position = Position::End;
        Ok(())
    }

    /// Drops what was read ahead, before a movement that does not depend on it.
    fn forget_ahead(&mut self) {
        self.ahead.reset();
        self.failed = None;
    }

    pub fn close(&mut self) {
        self.it = None;
        self.ahead = Ahead::default();
        self.failed = None;
    }
}

/// Why a cursor could not move.
pub(crate) enum Closed {
    /// The iterator was closed.
    Iterator,
    /// The engine failed.
    Engine(strata::Error),
}

impl From<strata::Error> for Closed {
    fn from(e: strata::Error) -> Closed {
        Closed::Engine(e)
    }
}

/// The position after a movement: before the entry the engine's iterator landed on (`moved`
/// says whether it is in the range), or `otherwise` when it ran off its range. A failed
/// movement leaves the engine's iterator on no entry: the cursor is then at the end, and the
/// error is returned.
fn settle(
    position: &mut Position,
    moved: strata::Result<bool>,
    otherwise: Position,
) -> Result<(), Closed> {
    let landed = moved.map(|holds| if holds { Position::Before } else { otherwise });
    *position = *landed.as_ref().unwrap_or(&Position::End);
    landed.map(|_| ()).map_err(Closed::Engine)
}
