//! The write-ahead log's files: creating one, with the header record that names its kind.
//! The records' framing is in `log.rs`; replay at open is in `db/recovery.rs`.

use crate::error::Result;
use crate::key::FileNumber;
use crate::log::{LogKind, LogWriter, header_record};
use crate::version::{TableStore, io_err, wal_file_name};

/// Creates WAL `number` in the database's directory, with its header record, and makes its
/// directory entry durable.
pub(crate) fn create_wal(store: &TableStore, number: FileNumber) -> Result<LogWriter> {
    create_wal_in(store.fs.as_ref(), &store.dir, number)
}

/// [`create_wal`] in any directory: a checkpoint's too.
pub(crate) fn create_wal_in(
    fs: &dyn crate::fs::FileSystem,
    dir: &std::path::Path,
    number: FileNumber,
) -> Result<LogWriter> {
    let path = dir.join(wal_file_name(number));
    let file = fs.create_log(&path).map_err(io_err("create", &path))?;
    let mut w = LogWriter::new(file, path);
    w.add_record(&header_record(LogKind::Wal))?;
    w.flush()?;
    // The WAL's directory entry must be durable before synced writes land in it.
    fs.sync_dir(dir).map_err(io_err("fsync", dir))?;
    Ok(w)
}
