//! Arbitrary and mutated bytes through every decoder: each must return, never panic.
//! (The cargo-fuzz targets in `fuzz/` run the same entry points for as long as one likes.)

mod common;

use proptest::prelude::*;
use strata::fuzz;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(3000)
}

/// Real SSTs (with a whole filter and with a partitioned one), WALs and MANIFESTs to mutate,
/// made once.
fn samples() -> &'static Vec<(String, Vec<u8>)> {
    static SAMPLES: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    SAMPLES.get_or_init(|| {
        let whole = strata::Options {
            block_size: 256,
            ..common::options()
        };
        let partitioned = strata::Options {
            index_kind: strata::IndexKind::BTree,
            filter_kind: strata::FilterKind::Partitioned,
            ..whole.clone()
        };
        let mut out = sample_files(whole);
        out.extend(sample_files(partitioned));
        out
    })
}

fn sample_files(options: strata::Options) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let db = strata::Db::open(dir.path(), options).unwrap();
    for i in 0..300u32 {
        db.put(
            format!("key{i:04}").as_bytes(),
            format!("value{i}").as_bytes(),
        )
        .unwrap();
    }
    db.flush().unwrap();
    db.put(b"after", b"flush").unwrap();
    db.delete(b"key0001").unwrap();
    drop(db);
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".sst") || name.ends_with(".wal") || name.starts_with("MANIFEST") {
            out.push((name, std::fs::read(&p).unwrap()));
        }
    }
    out
}

fn run_all(data: &[u8]) {
    fuzz::block(data);
    fuzz::sst(data);
    fuzz::wal(data);
    fuzz::write_batch(data);
    fuzz::manifest_edit(data);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        run_all(&data);
    }

    #[test]
    fn mutated_real_files_never_panic(
        which in any::<usize>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in proptest::option::of(any::<usize>())
    ) {
        let s = samples();
        let (name, original) = &s[which % s.len()];
        let mut data = original.clone();
        for (pos, x) in flips {
            let n = data.len();
            if n > 0 {
                data[pos % n] ^= x | 1;
            }
        }
        if let Some(c) = cut {
            let n = data.len();
            data.truncate(c % (n + 1));
        }
        if name.ends_with(".sst") {
            fuzz::sst(&data);
        } else if name.ends_with(".wal") {
            fuzz::wal(&data);
        } else {
            fuzz::wal(&data); // a MANIFEST is a log too; its records are edits
            fuzz::manifest_edit(&data);
        }
        run_all(&data);
    }
}
