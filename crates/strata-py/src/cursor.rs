//! The cursor behind a Python `Iterator`: plyvel's model, where the cursor sits between two
//! entries, `next()` gives the one after it and `prev()` the one before, over the engine's
//! `DbIterator`, which sits on an entry.

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
    position: Position,
    ends: Ends,
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
        }
    }

    /// The iterator's next entry, moving the cursor over it; `None` past the last.
    pub fn next(&mut self) -> Result<Option<Entry>, Closed> {
        if self.reverse {
            self.backward()
        } else {
            self.forward()
        }
    }

    /// The entry `next` gave last, moving the cursor back over it; `None` before the first.
    pub fn prev(&mut self) -> Result<Option<Entry>, Closed> {
        if self.reverse {
            self.forward()
        } else {
            self.backward()
        }
    }

    /// The entry after the cursor, moving the cursor past it.
    fn forward(&mut self) -> Result<Option<Entry>, Closed> {
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
        let entry = (it.key().to_vec(), it.value().to_vec());
        let moved = it.next().and_then(|()| self.ends.holds(it, true));
        settle(&mut self.position, moved, Position::End)?;
        Ok(Some(entry))
    }

    /// The entry before the cursor, moving the cursor back before it.
    fn backward(&mut self) -> Result<Option<Entry>, Closed> {
        let it = self.it.as_mut().ok_or(Closed::Iterator)?;
        let r = match (self.position, &self.ends.through) {
            (Position::Start, _) => return Ok(None),
            (Position::End, None) => it.seek_to_last(),
            (Position::End, Some(stop)) => it.seek_for_prev(stop),
            (Position::Before, _) => it.prev(),
        };
        let moved = r.and_then(|()| self.ends.holds(it, false));
        settle(&mut self.position, moved, Position::Start)?;
        Ok((self.position == Position::Before).then(|| (it.key().to_vec(), it.value().to_vec())))
    }

    /// Places the cursor just before `target`: after every key below it.
    pub fn seek(&mut self, target: &[u8]) -> Result<(), Closed> {
        let it = self.it.as_mut().ok_or(Closed::Iterator)?;
        let moved = it.seek(target).and_then(|()| self.ends.holds(it, true));
        settle(&mut self.position, moved, Position::End)
    }

    /// Places the cursor before the range's first key.
    pub fn seek_to_start(&mut self) -> Result<(), Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        self.position = Position::Start;
        Ok(())
    }

    /// Places the cursor after the range's last key.
    pub fn seek_to_stop(&mut self) -> Result<(), Closed> {
        self.it.as_ref().ok_or(Closed::Iterator)?;
        self.position = Position::End;
        Ok(())
    }

    pub fn close(&mut self) {
        self.it = None;
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
