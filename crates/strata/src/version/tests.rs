use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::key::{SeqNo, ValueKind, internal_key};
use crate::version::edit::NewFile;

/// A file of `level` numbered `number` over the user keys `smallest..=largest`.
fn file_meta(
    store: &Arc<TableStore>,
    level: usize,
    number: u64,
    (smallest, largest): (&[u8], &[u8]),
) -> Arc<FileMeta> {
    let f = NewFile {
        level: Level(level),
        number: FileNumber(number),
        size: 1,
        smallest: internal_key(smallest, SeqNo(7), ValueKind::Value),
        largest: internal_key(largest, SeqNo(3), ValueKind::Value),
        entries: 1,
        deletions: 0,
        range_deletions: 0,
        filter_millibits: None,
        family: 0,
    };
    Arc::new(FileMeta::new(store.clone(), &f))
}

/// A sorted level whose files hold the user-key ranges `ranges`, given in key order and
/// not overlapping, after [`Version::index_files`] as `VersionSet` calls it.
fn level_of(ranges: &[(Vec<u8>, Vec<u8>)]) -> Version {
    let store = Arc::new(TableStore::in_memory());
    let mut v = Version::default();
    for (i, (smallest, largest)) in ranges.iter().enumerate() {
        v.levels[1].push(file_meta(&store, 1, i as u64 + 1, (smallest, largest)));
    }
    v.index_files();
    v
}

/// A version's depth is one past its deepest level with a file, whatever lies between (the
/// model tests check the lookups that walk it).
#[test]
fn depth_reaches_the_deepest_level_with_a_file() {
    let store = Arc::new(TableStore::in_memory());
    let file = |level: usize, number: u64| file_meta(&store, level, number, (b"a", b"z"));
    let mut v = Version::default();
    v.index_files();
    assert_eq!(v.depth, 1, "an empty tree");
    v.levels[0].push(file(0, 1));
    v.index_files();
    assert_eq!(v.depth, 1, "level 0 alone");
    v.levels[3].push(file(3, 2));
    v.index_files();
    assert_eq!(v.depth, 4, "levels 0 and 3");
    assert_eq!(v.file_for(3, b"m").map(|f| f.number), Some(FileNumber(2)));
    v.levels[NUM_LEVELS - 1].push(file(NUM_LEVELS - 1, 3));
    v.index_files();
    assert_eq!(v.depth, NUM_LEVELS, "the last level");
}

/// Keys from a small alphabet, so that some are prefixes of others, and the empty key.
fn keys() -> impl Strategy<Value = BTreeSet<Vec<u8>>> {
    prop::collection::btree_set(prop::collection::vec(b'a'..=b'd', 0..6), 1..60)
}

proptest! {
    /// The search over a level's laid-out bounds names the file whose range holds the key,
    /// as a scan of the files' own ranges finds it, for keys at, inside, between and outside
    /// the files' ranges.
    #[test]
    fn file_for_finds_the_file_whose_range_holds_the_key(
        bounds in keys(),
        single in prop::collection::vec(any::<bool>(), 60),
        probes in prop::collection::vec(prop::collection::vec(b'a'..=b'e', 0..7), 0..40),
    ) {
        // Consecutive keys pair up into files' ranges; a file of one key where `single` says.
        let sorted: Vec<Vec<u8>> = bounds.iter().cloned().collect();
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < sorted.len() {
            let one = single.get(ranges.len()).copied().unwrap_or(false) || i + 1 == sorted.len();
            let last = if one { i } else { i + 1 };
            ranges.push((sorted[i].clone(), sorted[last].clone()));
            i = last + 1;
        }
        let v = level_of(&ranges);
        prop_assert_eq!(v.bounds[1].ends.len(), ranges.len(), "the bounds are laid out");
        for key in sorted.iter().chain(&probes) {
            let model = ranges
                .iter()
                .position(|(s, l)| s <= key && key <= l)
                .map(|i| FileNumber(i as u64 + 1));
            let found = v.file_for(1, key).map(|f| f.number);
            prop_assert_eq!(found, model, "key {:?}", key);
        }
    }
}
