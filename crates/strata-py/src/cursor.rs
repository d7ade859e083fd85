//! The cursor behind a Python `Iterator`: plyvel's model, where the cursor sits between two
//! entries, `next()` gives the one after it and `prev()` the one before, over the engine's
//! `DbIterator`, which sits on an entry.

use strata::DbIterator;

/// The key range of an iterator, as the engine's read options take it: an inclusive lower
/// bound and an exclusive upper bound.
pub(crate) struct Bounds {
    pub lower: Option<Vec<u8>>,
    pub upper: Option<Vec<u8>>,
}

impl Bounds {
    /// The bounds of `start`/`stop` (each inclusive or not) or of a `prefix`.
    pub fn new(
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        include_start: bool,
        include_stop: bool,
    ) -> Result<Bounds, &'static str> {
        // The smallest key after `k`.
        let after = |mut k: Vec<u8>| {
            k.push(0);
            k
        };
        if let Some(prefix) = prefix {
            if start.is_some() || stop.is_some() {
                return Err("prefix cannot be combined with start or stop");
            }
            return Ok(Bounds {
                upper: prefix_end(&prefix),
                lower: Some(prefix),
            });
        }
        Ok(Bounds {
            lower: start.map(|s| if include_start { s } else { after(s) }),
            upper: stop.map(|s| if include_stop { after(s) } else { s }),
        })
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

/// Where the cursor sits, in the iterator's own order (largest key first when reversed).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Position {
    /// Before the first entry; the engine's iterator is not positioned.
    Start,
    /// Before the entry the engine's iterator is on.
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
    upper: Option<Vec<u8>>,
    position: Position,
}

impl Cursor {
    pub fn new(it: DbIterator, reverse: bool, upper: Option<Vec<u8>>) -> Cursor {
        Cursor {
            it: Some(it),
            reverse,
            upper,
            position: Position::Start,
        }
    }

    /// The entry after the cursor, moving the cursor past it; `None` at the end.
    pub fn next(&mut self) -> strata::Result<Option<Entry>> {
        let reverse = self.reverse;
        let Some(it) = self.it.as_mut() else {
            return Ok(None);
        };
        match self.position {
            Position::End => return Ok(None),
            Position::Before => {}
            Position::Start => {
                let r = if reverse {
                    it.seek_to_last()
                } else {
                    it.seek_to_first()
                };
                settle(&mut self.position, r, it, Position::End)?;
                if self.position == Position::End {
                    return Ok(None);
                }
            }
        }
        let entry = (it.key().to_vec(), it.value().to_vec());
        let r = if reverse { it.prev() } else { it.next() };
        settle(&mut self.position, r, it, Position::End)?;
        Ok(Some(entry))
    }

    /// The entry before the cursor, moving the cursor back over it; `None` at the start.
    pub fn prev(&mut self) -> strata::Result<Option<Entry>> {
        let reverse = self.reverse;
        let Some(it) = self.it.as_mut() else {
            return Ok(None);
        };
        let r = match self.position {
            Position::Start => return Ok(None),
            Position::End if reverse => it.seek_to_first(),
            Position::End => it.seek_to_last(),
            Position::Before if reverse => it.next(),
            Position::Before => it.prev(),
        };
        settle(&mut self.position, r, it, Position::Start)?;
        Ok((self.position == Position::Before).then(|| (it.key().to_vec(), it.value().to_vec())))
    }

    /// Places the cursor before the first entry at or after `target` (at or before it, for a
    /// reverse cursor).
    pub fn seek(&mut self, target: &[u8]) -> strata::Result<()> {
        let Some(it) = self.it.as_mut() else {
            return Ok(());
        };
        let r = if !self.reverse {
            it.seek(target)
        } else if self.upper.as_deref().is_some_and(|u| target >= u) {
            it.seek_to_last()
        } else {
            it.seek_for_prev(target)
        };
        settle(&mut self.position, r, it, Position::End)?;
        Ok(())
    }

    pub fn seek_to_start(&mut self) {
        self.position = Position::Start;
    }

    pub fn seek_to_stop(&mut self) {
        self.position = Position::End;
    }

    pub fn close(&mut self) {
        self.it = None;
    }
}

/// The position after a movement: before the entry the engine's iterator landed on, or
/// `otherwise` when it ran off its range. A failed movement leaves the engine's iterator on
/// no entry: the cursor is then at the end, and the error is returned.
fn settle(
    position: &mut Position,
    moved: strata::Result<()>,
    it: &DbIterator,
    otherwise: Position,
) -> strata::Result<()> {
    let landed = moved.map(|()| {
        if it.valid() {
            Position::Before
        } else {
            otherwise
        }
    });
    *position = *landed.as_ref().unwrap_or(&Position::End);
    landed.map(|_| ())
}
