//! Writes since a sequence number, read back from the WAL files (how a replica that fell
//! behind catches up), the WALs kept for that once their writes are in tables, and the
//! listener told of each write group as it is logged (how a replica follows live).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Db;
use super::state::{DbInner, Retired, parse_file_name};
use crate::batch::{WriteBatch, decode_record};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::FileNumber;
use crate::log::{LogKind, RecoveryMode, read_log, strip_header};
use crate::mutex::lock;
use crate::version::{io_err, wal_file_name};

impl DbInner {
    /// Sets WAL `number` aside now that its writes are in tables: deletes it, or keeps it
    /// while [`Options::wal_ttl`](crate::Options::wal_ttl) and
    /// [`Options::wal_size_limit`](crate::Options::wal_size_limit) allow, deleting the
    /// kept WALs they no longer allow, oldest first.
    pub(super) fn retire_wal(&self, number: FileNumber) {
        let path = self.dir.join(wal_file_name(number));
        let (ttl, limit) = (self.opts.wal_ttl, self.opts.wal_size_limit);
        if ttl.is_none() && limit == 0 {
            let _ = self.store.fs.remove(&path);
            return;
        }
        let mut kept = lock(&self.retired_wals);
        if !kept.iter().any(|r| r.number == number) {
            let bytes = self.store.fs.file_size(&path).unwrap_or(0);
            let at = kept.partition_point(|r| r.number < number);
            kept.insert(
                at,
                Retired {
                    number,
                    since: Instant::now(),
                    bytes,
                },
            );
        }
        let now = Instant::now();
        let mut total: u64 = kept.iter().map(|r| r.bytes).sum();
        while let Some(oldest) = kept.front() {
            let too_old = ttl.is_some_and(|ttl| now.duration_since(oldest.since) >= ttl);
            let too_big = limit > 0 && total > limit;
            if !too_old && !too_big {
                break;
            }
            total -= oldest.bytes;
            let _ = self
                .store
                .fs
                .remove(&self.dir.join(wal_file_name(oldest.number)));
            kept.pop_front();
        }
    }
}

impl Db {
    /// The sequence number of the newest write that reads see (0 for a database never
    /// written). Each operation of a batch takes one number.
    pub fn latest_sequence(&self) -> u64 {
        self.inner.visible.load(Ordering::Acquire)
    }

    /// The write batches committed from sequence number `seq` on, oldest first, each with
    /// the sequence number of its first operation, read from the WAL files (RocksDB's
    /// `GetUpdatesSince`). The first batch handed out is the one that holds `seq`; batches
    /// that writers sent together may come as one. The iterator ends at the newest write
    /// logged when it reaches the active WAL; ask again from where it stopped for more.
    ///
    /// WALs whose writes are in tables are deleted unless
    /// [`Options::wal_ttl`](crate::Options::wal_ttl) or
    /// [`Options::wal_size_limit`](crate::Options::wal_size_limit) keep them: asked for
    /// writes older than the oldest kept, the iterator yields [`Error::UpdatesGone`], and
    /// the caller copies the database whole instead. `seq` past the newest write plus one
    /// is refused.
    pub fn updates_since(&self, seq: u64) -> Result<UpdatesSince> {
        let latest = self.latest_sequence();
        if seq > latest.saturating_add(1) {
            return Err(Error::InvalidArgument(format!(
                "updates_since: sequence number {seq} is past the newest write ({latest})"
            )));
        }
        let store = &self.inner.store;
        let mut files: Vec<FileNumber> = store
            .fs
            .list(&self.inner.dir)
            .map_err(io_err("list", &self.inner.dir))?
            .iter()
            .filter_map(|name| parse_file_name(name))
            .filter(|(_, ext)| *ext == "wal")
            .map(|(n, _)| n)
            .collect();
        files.sort();
        Ok(UpdatesSince {
            fs: store.fs.clone(),
            dir: self.inner.dir.clone(),
            files: files.into(),
            batches: Vec::new().into_iter(),
            next: seq.max(1),
            latest,
            done: false,
        })
    }
}

/// The iterator [`Db::updates_since`] returns.
pub struct UpdatesSince {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    /// WAL files not read yet, oldest first.
    files: VecDeque<FileNumber>,
    /// The batches of the file being read.
    batches: std::vec::IntoIter<(u64, WriteBatch)>,
    /// The first sequence number not handed out yet.
    next: u64,
    /// The newest write visible when the iterator was made: the files must hold it.
    latest: u64,
    /// An error ended it.
    done: bool,
}

impl UpdatesSince {
    /// The sequence number the next batch starts at: where to ask again once this
    /// iterator has ended.
    pub fn next_sequence(&self) -> u64 {
        self.next
    }

    fn read(&self, number: FileNumber) -> Result<Vec<(u64, WriteBatch)>> {
        let path = self.dir.join(wal_file_name(number));
        let data = match self.fs.read_all(&path) {
            Ok(d) => d,
            // Set aside and deleted since the list was made: what it held is gone.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::UpdatesGone {
                    asked: self.next,
                    oldest: 0,
                });
            }
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        // The active WAL may end in a record being written: read_log stops before it.
        let contents = read_log(&path, &data, RecoveryMode::Strict)?;
        strip_header(&path, contents, LogKind::Wal)?
            .into_iter()
            .map(|(offset, record)| {
                decode_record(&record)
                    .map(|(seq, batch)| (seq.0, batch))
                    .map_err(|e| e.at(&path, offset))
            })
            .collect()
    }

    fn fail(&mut self, e: Error) -> Option<Result<(u64, WriteBatch)>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for UpdatesSince {
    type Item = Result<(u64, WriteBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            if let Some((first, batch)) = self.batches.next() {
                let end = first + batch.len() as u64;
                if end <= self.next {
                    continue;
                }
                if first > self.next {
                    let asked = self.next;
                    return self.fail(Error::UpdatesGone {
                        asked,
                        oldest: first,
                    });
                }
                self.next = end;
                return Some(Ok((first, batch)));
            }
            let Some(number) = self.files.pop_front() else {
                self.done = true;
                // Every visible write is in a WAL before it is visible: none may be missing.
                if self.next <= self.latest {
                    let asked = self.next;
                    return self.fail(Error::UpdatesGone {
                        asked,
                        oldest: self.latest + 1,
                    });
                }
                return None;
            };
            match self.read(number) {
                Ok(batches) => self.batches = batches.into_iter(),
                Err(e) => return self.fail(e),
            }
        }
    }
}
