//! Entry points for fuzzing the decoders, for the fuzz targets and the decoder tests (hidden;
//! not part of the API). Each takes arbitrary bytes and must return, never panic, and never
//! allocate without bound.

use std::path::Path;
use std::sync::Arc;

use crate::cache::BlockCache;
use crate::comparator::KeyOrder;
use crate::fs::{FileSystem, MemFs};
use crate::iter::InternalIterator;
use crate::key::FileNumber;
use crate::log::{LogKind, RecoveryMode, read_log, strip_header};
use crate::sstable::block::{Block, BlockOrder};
use crate::sstable::reader::Table;

/// Decodes a block and walks it both ways and by seeks.
pub fn block(data: &[u8]) {
    let Ok(block) = Block::new(data.to_vec()) else {
        return;
    };
    let block = Arc::new(block);
    let mut it = block.iter(BlockOrder::Internal(KeyOrder::Bytewise));
    let mut steps = 0;
    if it.seek_to_first().is_ok() {
        while it.valid() && steps < 10_000 && it.next().is_ok() {
            steps += 1;
        }
    }
    if it.seek_to_last().is_ok() {
        while it.valid() && steps < 20_000 && it.prev().is_ok() {
            steps += 1;
        }
    }
    let _ = it.seek(data.get(..data.len().min(24)).unwrap_or_default());
}

/// Opens the bytes as an SST and verifies it (every block, every key).
pub fn sst(data: &[u8]) {
    let fs = MemFs::new();
    let path = Path::new("/f/000001.sst");
    if fs.create_dir_all(Path::new("/f")).is_err() {
        return;
    }
    let Ok(mut f) = fs.create(path) else { return };
    if f.append(data).is_err() {
        return;
    }
    drop(f);
    let Ok(file) = fs.open(path) else { return };
    if let Ok(t) = Table::open(
        file,
        path,
        FileNumber(1),
        Arc::new(BlockCache::new(1 << 20)),
        KeyOrder::Bytewise,
    ) {
        let t = Arc::new(t);
        let _ = t.verify();
        let _ = t.get(
            &crate::key::lookup_key(b"k", crate::key::SeqNo::MAX),
            b"k",
            true,
        );
    }
}

/// Splits the bytes into log records (strict and salvage) and decodes each as a WAL batch.
pub fn wal(data: &[u8]) {
    let path = Path::new("000001.wal");
    for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
        if let Ok(c) = read_log(path, data, mode)
            && let Ok(records) = strip_header(path, c, LogKind::Wal)
        {
            for (_, r) in records {
                write_batch(&r);
            }
        }
    }
}

/// Decodes the bytes as a WAL record payload (a write batch) and walks its operations.
pub fn write_batch(data: &[u8]) {
    if let Ok((_, batch)) = crate::batch::decode_record(data) {
        for op in batch.iter() {
            if op.is_err() {
                break;
            }
        }
    }
}

/// Decodes the bytes as a MANIFEST version edit.
pub fn manifest_edit(data: &[u8]) {
    let _ = crate::version::edit::VersionEdit::decode(data);
}
