//! Compressed tables through the engine: zstd tables with a dictionary of their own.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::Rng;
use strata::{Compression, Db, MemFs, Options};

/// 100-byte values drawn from a pool of 512: they repeat across a table's blocks but seldom
/// within one, which is what a table's dictionary finds again.
fn pool(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..512)
        .map(|_| (0..100).map(|_| b'a' + rng.below(26) as u8).collect())
        .collect()
}

fn zstd_options(fs: &MemFs, dictionary_bytes: usize) -> Options {
    let mut o = Options {
        compression: Compression::Zstd,
        zstd_dictionary_bytes: dictionary_bytes,
        write_buffer_size: 1 << 20,
        idle_merge_after: None,
        ..common::options()
    };
    o.fs = Arc::new(fs.clone());
    o
}

fn table_bytes(db: &Db) -> u64 {
    db.stats()
        .families
        .iter()
        .flat_map(|f| &f.files)
        .map(|f| f.size)
        .sum()
}

/// The same writes (puts in random order, overwrites, deletes) into a database whose zstd
/// tables train dictionaries and one whose tables do not: both read back exactly the model,
/// after flushes, a full compaction and a reopen, and the tables with dictionaries take
/// fewer bytes.
#[test]
fn zstd_tables_with_dictionaries_read_back_every_entry_in_fewer_bytes() {
    let seed = common::seed("zstd_tables_with_dictionaries");
    let mut bytes = Vec::new();
    for dictionary_bytes in [0, 16 << 10] {
        let mut rng = Rng(seed);
        let values = pool(&mut rng);
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, zstd_options(&fs, dictionary_bytes)).unwrap();
        let mut model = BTreeMap::new();
        for _ in 0..60_000 {
            let key = format!("key{:08}", rng.below(40_000)).into_bytes();
            if rng.chance(5) {
                db.delete(&key).unwrap();
                model.remove(&key);
            } else {
                let value = values[rng.below(512) as usize].clone();
                db.put(&key, &value).unwrap();
                model.insert(key, value);
            }
        }
        db.flush().unwrap();
        assert!(
            common::dump(&db) == model,
            "flushed tables differ from the model"
        );
        db.compact_range(None, None).unwrap();
        assert!(
            common::dump(&db) == model,
            "compacted tables differ from the model"
        );
        for (k, v) in model.iter().step_by(7) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        bytes.push(table_bytes(&db));
        db.close().unwrap();
        let db = Db::open(dir, zstd_options(&fs, dictionary_bytes)).unwrap();
        assert!(
            common::dump(&db) == model,
            "reopened tables differ from the model"
        );
    }
    let (without, with) = (bytes[0], bytes[1]);
    assert!(
        with * 10 < without * 9,
        "{with} table bytes with dictionaries, {without} without"
    );
}

#[test]
fn a_dictionary_size_zstd_cannot_train_is_refused() {
    let fs = MemFs::new();
    for bytes in [1, 255, (1 << 20) + 1] {
        let err = Db::open(Path::new("/db"), zstd_options(&fs, bytes)).unwrap_err();
        assert!(
            err.to_string().contains("zstd_dictionary_bytes"),
            "{bytes}: {err}"
        );
    }
}
