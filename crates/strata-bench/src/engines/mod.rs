//! The engines under test, behind one interface. Every engine gets the same settings.

#[cfg(feature = "compare")]
pub mod fjall_engine;
#[cfg(feature = "compare")]
pub mod leveldb_engine;
#[cfg(feature = "compare")]
pub mod rocksdb_engine;
pub mod strata_engine;

mod engine;

pub use engine::{Engine, Result, Seen, Settings, Start, Tree, digest};

use std::path::Path;

pub const ENGINES: &[&str] = &["strata", "rocksdb", "leveldb", "fjall"];

/// Strata with its idle merge on (`Options::idle_merge_after`, on by default in Strata).
/// The engine named `strata` runs with it off: no other engine has one, reads after
/// `waitforcompaction` should see the tree compaction left, and `compact` shows what a
/// whole-tree merge does for every engine. This one shows the idle merge as what it is.
pub const STRATA_IDLE: &str = "strata-idle";

/// Strata with B-tree indexes in its tables (`IndexKind::BTree`) rather than its flat,
/// binary-searched ones; its idle merge off, as `strata`'s.
pub const STRATA_BTREE: &str = "strata-btree";

/// Strata with B-tree indexes and partitioned Bloom filters (`--partition_index_and_filters`):
/// open tables hold only the roots of both, and the rest goes through the block cache.
pub const STRATA_PARTITIONED: &str = "strata-partitioned";

/// An engine that answers wrongly on purpose, so that a test can see `--compare` catch it:
/// Strata with every 997th key dropped on the way in. Not listed among the engines.
pub const WRONG: &str = "strata-wrong";

/// An engine that answers wrongly on purpose with values of the right length: Strata that
/// keeps the first version of every 97th key, ignoring later writes of it, as an engine
/// reading a stale version would answer. Not listed among the engines.
pub const STALE: &str = "strata-stale";

/// Opens engine `name` in `dir`.
pub fn open(name: &str, dir: &Path, s: &Settings) -> Result<Box<dyn Engine>> {
    if s.universal && name != "rocksdb" {
        return Err(format!("{name} has no universal compaction (RocksDB's)"));
    }
    match name {
        "strata" => Ok(Box::new(strata_engine::StrataEngine::open(dir, s, false)?)),
        STRATA_IDLE => Ok(Box::new(strata_engine::StrataEngine::open(dir, s, true)?)),
        STRATA_BTREE => {
            let s = Settings {
                btree_index: true,
                ..s.clone()
            };
            Ok(Box::new(strata_engine::StrataEngine::open(dir, &s, false)?))
        }
        STRATA_PARTITIONED => {
            let s = Settings {
                partition_index_and_filters: true,
                ..s.clone()
            };
            Ok(Box::new(strata_engine::StrataEngine::open(dir, &s, false)?))
        }
        WRONG => Ok(Box::new(strata_engine::Faulty(
            strata_engine::StrataEngine::open(dir, s, false)?,
            strata_engine::Fault::DropKeys,
        ))),
        STALE => Ok(Box::new(strata_engine::Faulty(
            strata_engine::StrataEngine::open(dir, s, false)?,
            strata_engine::Fault::StaleValues,
        ))),
        #[cfg(feature = "compare")]
        "rocksdb" => Ok(Box::new(rocksdb_engine::RocksEngine::open(dir, s)?)),
        #[cfg(feature = "compare")]
        "leveldb" => Ok(Box::new(leveldb_engine::LevelEngine::open(dir, s)?)),
        #[cfg(feature = "compare")]
        "fjall" => Ok(Box::new(fjall_engine::FjallEngine::open(dir, s)?)),
        other if ENGINES.contains(&other) => Err(format!(
            "engine {other} is not built in: rebuild with `--features compare` (see the README)"
        )),
        other => Err(format!(
            "unknown engine {other:?} (one of {})",
            ENGINES.join(", ")
        )),
    }
}
