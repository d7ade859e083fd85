//! The one error type of the engine.
//!
//! A missing key is `Ok(None)`, never an error. Every variant prints a sentence a person can
//! act on.

use std::path::PathBuf;

/// What went wrong in a call to the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused an I/O call.
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        /// The operation that failed (`open`, `write`, `fsync`, ...).
        op: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes read back from a file are not what Strata wrote there.
    #[error("corruption in {} at offset {offset}: {reason}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged block or record within the file.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// The caller passed something the engine cannot accept; nothing was written.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Another handle, in this process or another, holds the database's lock.
    #[error("database at {} is locked by another process or handle", .0.display())]
    Locked(PathBuf),
    /// An earlier write or background job failed in a way that may have lost data; the handle
    /// refuses writes until the database is reopened.
    #[error("database refuses writes after an earlier failure: {0}")]
    Poisoned(String),
    /// The database handle was closed.
    #[error("database is closed")]
    Closed,
    /// A transaction's commit found that another writer wrote a key the transaction read or
    /// wrote after the transaction began. Nothing of the transaction was written; run it
    /// again.
    #[error(
        "transaction conflict: a key it read or wrote ({}) was written after it began; \
         retry it",
        String::from_utf8_lossy(.key)
    )]
    Conflict {
        /// The first key found written since the transaction's snapshot.
        key: Vec<u8>,
    },
    /// The merge operator could not fold a key's operands (or none is set and the key has
    /// some).
    #[error("merge of key {} failed: {reason}", String::from_utf8_lossy(.key))]
    Merge {
        /// The key read.
        key: Vec<u8>,
        /// What the operator said.
        reason: String,
    },
    /// [`Db::updates_since`](crate::Db::updates_since) was asked for writes older than the
    /// oldest WAL kept (see [`Options::wal_ttl`](crate::Options::wal_ttl)): the caller
    /// copies the database whole instead.
    #[error(
        "the writes from sequence number {asked} on are no longer in the WAL files kept \
         (the oldest kept starts at {oldest}); copy the whole database instead"
    )]
    UpdatesGone {
        /// The sequence number asked for.
        asked: u64,
        /// The first sequence number the kept WAL files hold (the next one to be written
        /// when they hold none).
        oldest: u64,
    },
    /// A file was written by a format version this build does not understand.
    #[error("unsupported format in {}: {reason}", file.display())]
    UnsupportedFormat {
        /// The file with the unknown format.
        file: PathBuf,
        /// What was found.
        reason: String,
    },
}

/// The result type of every fallible engine call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True when the error reports damaged data on disk.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True for [`Error::Conflict`]: the transaction wrote nothing and may be retried.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Rebuild an error with the same meaning for a second caller (errors are not `Clone`
    /// because `std::io::Error` is not).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption {
                file,
                offset,
                reason,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::Poisoned(s) => Error::Poisoned(s.clone()),
            Error::Closed => Error::Closed,
            Error::Conflict { key } => Error::Conflict { key: key.clone() },
            Error::Merge { key, reason } => Error::Merge {
                key: key.clone(),
                reason: reason.clone(),
            },
            Error::UpdatesGone { asked, oldest } => Error::UpdatesGone {
                asked: *asked,
                oldest: *oldest,
            },
            Error::UnsupportedFormat { file, reason } => Error::UnsupportedFormat {
                file: file.clone(),
                reason: reason.clone(),
            },
        }
    }
}

/// A decoding failure without a file name yet; the caller that knows the file turns it into
/// [`Error::Corruption`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub &'static str);

impl DecodeError {
    pub(crate) fn at(self, file: impl Into<PathBuf>, offset: u64) -> Error {
        Error::corruption(file, offset, self.0)
    }
}
