//! SPOP of one member without walking over the members earlier pops deleted.
//!
//! A pop draws a random point between the set's first member and an upper bound of its
//! members, and takes the first member at or after it. The members it deletes stay in the
//! engine as tombstones until compaction drops them, and a walk from the next point would
//! step over each of them: a set popped empty costs time quadratic in its size. So each set
//! (by version) remembers runs of members known to hold no live member, the gaps: the stretch
//! a pop walked over to reach its member, and the member itself. A walk that reaches a gap
//! seeks past it, and gaps it joins become one. Any member added inside a gap removes that gap
//! (SADD and SMOVE tell [`crate::set_gaps::SetGaps::added`]); removals leave gaps true. The
//! memory is a cache: it starts empty after a restart, and a set whose gaps ever hid every
//! member (a transaction that did not commit) is walked again without them.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::Ctx;
use super::collection::{Collection, random_point, walk_range};
use crate::set_gaps::Gaps;
use crate::shared::Shared;
use crate::store;

/// The first live member at or after `from` (none after `g.top`), seeking past gaps, and the
/// start of the empty stretch that ends just before it. Gaps passed on the way are joined
/// into one that starts there.
fn next_live(
    shared: &Shared,
    set: &Collection,
    g: &mut Gaps,
    from: Vec<u8>,
) -> Result<(Option<Vec<u8>>, Vec<u8>), String> {
    let mut start = from.clone();
    let mut at = Bound::Included(from);
    if let Some((s, e)) = g.runs.range(..=start.clone()).next_back()
        && *e >= start
    {
        start = s.clone();
        at = Bound::Excluded(e.clone());
    }
    // The end of the last gap joined, if any.
    let mut joined: Option<Vec<u8>> = None;
    let found = loop {
        // Nothing lives past the top.
        let m = match &at {
            Bound::Included(m) if *m <= g.top => m,
            Bound::Excluded(m) if *m < g.top => m,
            _ => break None,
        };
        let next = g
            .runs
            .range((Bound::Excluded(m.clone()), Bound::Unbounded))
            .next()
            .filter(|(s, _)| **s <= g.top)
            .map(|(s, e)| (s.clone(), e.clone()));
        let stop = match &next {
            Some((s, _)) => Bound::Excluded(s.clone()),
            None => Bound::Included(g.top.clone()),
        };
        let mut found = None;
        let range = (bound_key(set, &at), bound_key(set, &stop));
        walk_range(shared, range, false, |k, _| {
            found = Some(store::element_member(k).to_vec());
            false
        })?;
        if found.is_some() {
            break found;
        }
        let Some((s, e)) = next else { break None };
        // Nothing lives between here and that gap: the two join.
        g.runs.remove(&s);
        at = Bound::Excluded(e.clone());
        joined = Some(e);
    };
    if let Some(end) = joined {
        g.runs.insert(start.clone(), end);
    }
    Ok((found, start))
}

fn bound_key(set: &Collection, b: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(m) => Bound::Included(set.element_key(m)),
        Bound::Excluded(m) => Bound::Excluded(set.element_key(m)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The last stored member of `set`, found by one walk from its end.
fn last_member(shared: &Shared, set: &Collection) -> Result<Option<Vec<u8>>, String> {
    let (lo, hi) = store::elements_range(set.header.version);
    let mut last = None;
    walk_range(
        shared,
        (Bound::Included(lo), Bound::Excluded(hi)),
        true,
        |k, _| {
            last = Some(store::element_member(k).to_vec());
            false
        },
    )?;
    Ok(last)
}

/// A member of `set` drawn at random for SPOP (members after wide gaps come up more often,
/// as RANDOMKEY's keys do), recorded as gone with the stretch walked to reach it.
/// Requires: the caller holds the set's stripe lock and deletes the member it returns.
pub(crate) fn pick(cx: &Ctx<'_, '_>, set: &Collection) -> Result<Option<Vec<u8>>, String> {
    let (shared, version) = (cx.shared, set.header.version);
    let mut g = match shared.set_gaps.take(version) {
        Some(g) => g,
        None => match last_member(shared, set)? {
            Some(top) => Gaps {
                runs: BTreeMap::new(),
                top,
            },
            None => return Ok(None),
        },
    };
    let (first, first_run) = next_live(shared, set, &mut g, Vec::new())?;
    let Some(first) = first else {
        // Gaps hid every member (a transaction's pops that never committed): walk again.
        shared.set_gaps.forget(version);
        return Ok(set.pick_one(cx)?.map(|(m, _)| m));
    };
    let point = random_point(&first, &g.top, shared.random_seed());
    let (found, run) = next_live(shared, set, &mut g, point)?;
    let (member, run) = match found {
        Some(m) => (m, run),
        // Past the last live member: that stretch is empty, and the pop takes the first.
        None => {
            g.runs.insert(run, g.top.clone());
            (first, first_run)
        }
    };
    g.runs.insert(run, member.clone());
    shared.set_gaps.keep(version, g);
    Ok(Some(member))
}
