//! Backups: a directory that holds several backups of a database, as RocksDB's
//! `BackupEngine` keeps them.
//!
//! A backup is a [`Db::checkpoint`] whose tables go into `shared/`, named by their number,
//! size and CRC-32C, so that a later backup shares every table that has not changed since
//! (tables never change once written); its other files (MANIFEST, CURRENT, an empty WAL) go
//! into `private/ID/`. The backup exists once `meta/ID` is written: it names every file with
//! its size and checksum (format in `docs/format.md`), and restore and verify check each
//! file against it. A backup made partway when the process died has no meta file; the next
//! purge removes what it left.
//!
//! ```text
//! BACKUP_DIR/LOCK
//! BACKUP_DIR/meta/1, meta/2, ...
//! BACKUP_DIR/shared/000012_4096_1a2b3c4d.sst, ...
//! BACKUP_DIR/private/1/CURRENT, MANIFEST-000021, 000020.wal
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Db;
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem, StdFs};

const META_MAGIC: &str = "strata-backup 1";
const COPY_CHUNK: usize = 1 << 20;

/// One backup, as its meta file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// The backup's number, counting up from 1 in its directory.
    pub id: u64,
    /// When it was made, in seconds since the Unix epoch.
    pub created_unix_secs: u64,
    /// Files the backup holds (tables, shared or not, and its private files).
    pub files: usize,
    /// Their bytes: the size of the database it restores.
    pub bytes: u64,
}

/// What [`BackupEngine::create`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBackup {
    /// The new backup.
    pub info: BackupInfo,
    /// Bytes it added to the backup directory: tables no earlier backup holds, and its
    /// private files. The rest it shares.
    pub added_bytes: u64,
}

/// A file of a backup: its name in the database, where it is in the backup directory, and
/// what restoring it must find there.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BackupFile {
    db_name: String,
    stored: String,
    size: u64,
    crc: u32,
}

struct Meta {
    id: u64,
    created_unix_secs: u64,
    files: Vec<BackupFile>,
}

impl Meta {
    fn info(&self) -> BackupInfo {
        BackupInfo {
            id: self.id,
            created_unix_secs: self.created_unix_secs,
            files: self.files.len(),
            bytes: self.files.iter().map(|f| f.size).sum(),
        }
    }

    fn encode(&self) -> String {
        let mut s = format!(
            "{META_MAGIC}\nid {}\ncreated {}\n",
            self.id, self.created_unix_secs
        );
        for f in &self.files {
            s.push_str(&format!(
                "file {} {} {} {:08x}\n",
                f.db_name, f.stored, f.size, f.crc
            ));
        }
        let crc = crc32c::crc32c(s.as_bytes());
        s.push_str(&format!("crc {crc:08x}\n"));
        s
    }

    /// Parses a meta file; anything but what [`Meta::encode`] writes is corruption.
    fn decode(path: &Path, bytes: &[u8]) -> Result<Meta> {
        let bad = |reason: String| Error::corruption(path, 0, reason);
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        let body_len = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad("no checksum line".into()))?;
        let (body, last) = text.split_at(body_len);
        let want = last
            .strip_prefix("crc ")
            .and_then(|h| u32::from_str_radix(h.trim_end_matches('\n'), 16).ok())
            .ok_or_else(|| bad(format!("bad checksum line {:?}", last.trim_end())))?;
        let got = crc32c::crc32c(body.as_bytes());
        if got != want {
            return Err(bad(format!(
                "checksum {got:08x} of the meta file, {want:08x} recorded"
            )));
        }
        let mut lines = body.lines();
        if lines.next() != Some(META_MAGIC) {
            return Err(Error::UnsupportedFormat {
                file: path.to_path_buf(),
                reason: format!("not a backup meta file of version 1 (`{META_MAGIC}`)"),
            });
        }
        let mut field = |name: &str| -> Result<u64> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("missing or bad `{name}` line")))
        };
        let id = field("id")?;
        let created_unix_secs = field("created")?;
        let mut files = Vec::new();
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let file = match parts.as_slice() {
                ["file", db_name, stored, size, crc] => BackupFile {
                    db_name: db_name.to_string(),
                    stored: stored.to_string(),
                    size: size
                        .parse()
                        .map_err(|_| bad(format!("bad size in {line:?}")))?,
                    crc: u32::from_str_radix(crc, 16)
                        .map_err(|_| bad(format!("bad checksum in {line:?}")))?,
                },
                _ => return Err(bad(format!("unexpected line {line:?}"))),
            };
            // The names come from disk: each must stay inside its directory.
            let private = format!("private/{id}/");
            let stored_name = file
                .stored
                .strip_prefix("shared/")
                .or_else(|| file.stored.strip_prefix(private.as_str()));
            if !stored_name.is_some_and(plain_name) || !plain_name(&file.db_name) {
                return Err(bad(format!("file names outside the backup in {line:?}")));
            }
            files.push(file);
        }
        Ok(Meta {
            id,
            created_unix_secs,
            files,
        })
    }
}

/// A single file name: no separators, not `.` or `..`.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The number of a table file name (`000012.sst`).
fn table_number(name: &str) -> Option<u64> {
    name.strip_suffix(".sst")?.parse().ok()
}

/// A directory of backups, held by one engine at a time (its `LOCK`).
pub struct BackupEngine {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    _lock: Box<dyn FileLock>,
    /// One operation at a time: a purge must not collect what a backup being made is about
    /// to name, nor two backups take one id.
    busy: std::sync::Mutex<()>,
}

impl BackupEngine {
    /// Opens (creating it if missing) the backup directory `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>) -> Result<BackupEngine> {
        BackupEngine::open_with(dir, Arc::new(StdFs))
    }

    /// Opens the backup directory `dir` through `fs`, which must be the file system of the
    /// databases it backs up.
    pub fn open_with(dir: impl AsRef<Path>, fs: Arc<dyn FileSystem>) -> Result<BackupEngine> {
        let dir = dir.as_ref().to_path_buf();
        for sub in ["meta", "shared", "private"] {
            let d = dir.join(sub);
            fs.create_dir_all(&d)
                .map_err(|e| Error::io("create", &d, e))?;
        }
        fs.sync_dir(&dir).map_err(|e| Error::io("fsync", &dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = fs.lock(&lock_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => Error::Locked(dir.clone()),
            _ => Error::io("lock", &lock_path, e),
        })?;
        Ok(BackupEngine {
            dir,
            fs,
            _lock: lock,
            busy: std::sync::Mutex::new(()),
        })
    }

    /// Backs `db` up while it takes writes: a checkpoint, whose tables are added to
    /// `shared/` unless a backup there holds them already.
    pub fn create(&self, db: &Db) -> Result<NewBackup> {
        let _busy = crate::mutex::lock(&self.busy);
        let fs = self.fs.as_ref();
        let id = self.take_id()?;
        let staging = self.dir.join(format!("staging-{id}"));
        self.remove_tree(&staging)?;
        db.checkpoint(&staging)?;
        let private_dir = self.dir.join("private").join(id.to_string());
        self.remove_tree(&private_dir)?;
        fs.create_dir_all(&private_dir)
            .map_err(|e| Error::io("create", &private_dir, e))?;
        self.sync(&self.dir.join("private"))?;
        let shared_dir = self.dir.join("shared");
        let shared = fs
            .list(&shared_dir)
            .map_err(|e| Error::io("list", &shared_dir, e))?;
        let mut names = fs
            .list(&staging)
            .map_err(|e| Error::io("list", &staging, e))?;
        names.sort();
        let mut files = Vec::new();
        let mut added_bytes = 0;
        for name in names {
            let from = staging.join(&name);
            let (stored, size, crc) = match table_number(&name) {
                Some(n) => {
                    // The checkpoint links the database's table: the backup takes a copy of
                    // its own, unless an earlier backup holds one (same number, size and
                    // checksum), so that damage to either does not reach the other.
                    let size = fs
                        .file_size(&from)
                        .map_err(|e| Error::io("stat", &from, e))?;
                    let prefix = format!("{n:06}_{size}_");
                    // Read for its checksum only when a name could match.
                    let held = match shared.iter().any(|s| s.starts_with(&prefix)) {
                        true => {
                            let (_, crc) = self.checksum(&from)?;
                            let name = format!("{prefix}{crc:08x}.sst");
                            shared.contains(&name).then_some((name, crc))
                        }
                        false => None,
                    };
                    let (name, crc) = match held {
                        Some(held) => held,
                        None => {
                            let tmp = shared_dir.join(format!("{prefix}.tmp"));
                            let (_, crc) = self.copy(&from, &tmp)?;
                            let name = format!("{prefix}{crc:08x}.sst");
                            let to = shared_dir.join(&name);
                            fs.rename(&tmp, &to)
                                .map_err(|e| Error::io("rename", &tmp, e))?;
                            added_bytes += size;
                            (name, crc)
                        }
                    };
                    (format!("shared/{name}"), size, crc)
                }
                None => {
                    // The checkpoint's own files: its MANIFEST, CURRENT and empty WAL.
                    let (size, crc) = self.checksum(&from)?;
                    let stored = format!("private/{id}/{name}");
                    let to = self.dir.join(&stored);
                    fs.rename(&from, &to)
                        .map_err(|e| Error::io("rename", &from, e))?;
                    added_bytes += size;
                    (stored, size, crc)
                }
            };
            files.push(BackupFile {
                db_name: name,
                stored,
                size,
                crc,
            });
        }
        for d in [shared_dir, private_dir] {
            self.sync(&d)?;
        }
        let meta = Meta {
            id,
            created_unix_secs: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            files,
        };
        // The backup exists from the rename of its meta file on.
        let meta_dir = self.dir.join("meta");
        let tmp = meta_dir.join(format!("{id}.tmp"));
        let mut f = fs.create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        f.append(meta.encode().as_bytes())
            .and_then(|()| f.sync())
            .map_err(|e| Error::io("write", &tmp, e))?;
        drop(f);
        let path = meta_dir.join(id.to_string());
        fs.rename(&tmp, &path)
            .map_err(|e| Error::io("rename", &tmp, e))?;
        fs.sync_dir(&meta_dir)
            .map_err(|e| Error::io("fsync", &meta_dir, e))?;
        self.remove_tree(&staging)?;
        Ok(NewBackup {
            info: meta.info(),
            added_bytes,
        })
    }

    /// Every backup, oldest first. A damaged meta file is an error naming it.
    pub fn list(&self) -> Result<Vec<BackupInfo>> {
        let _busy = crate::mutex::lock(&self.busy);
        self.ids()?
            .into_iter()
            .map(|id| self.meta(id).map(|m| m.info()))
            .collect()
    }

    /// Reads every file of backup `id` and checks its size and checksum.
    pub fn verify(&self, id: u64) -> Result<()> {
        let _busy = crate::mutex::lock(&self.busy);
        for f in self.meta(id)?.files {
            let path = self.dir.join(&f.stored);
            let (size, crc) = self.checksum(&path)?;
            check_file(&path, &f, size, crc)?;
        }
        Ok(())
    }

    /// Restores backup `id` into `target`, a directory that must not exist yet, checking
    /// every file's size and checksum as it is copied. On any failure `target` is removed:
    /// a restore either makes the whole database or nothing.
    pub fn restore(&self, id: u64, target: impl AsRef<Path>) -> Result<()> {
        let _busy = crate::mutex::lock(&self.busy);
        let target = target.as_ref();
        let fs = self.fs.as_ref();
        let meta = self.meta(id)?;
        if fs.exists(target) {
            return Err(Error::InvalidArgument(format!(
                "restore: {} exists already",
                target.display()
            )));
        }
        fs.create_dir_all(target)
            .map_err(|e| Error::io("create", target, e))?;
        let result = self.restore_files(&meta, target);
        if result.is_err() {
            let _ = self.remove_tree(target);
        }
        result
    }

    fn restore_files(&self, meta: &Meta, target: &Path) -> Result<()> {
        let fs = self.fs.as_ref();
        // CURRENT last: until it is there, the directory is not a database.
        let mut files: Vec<&BackupFile> = meta.files.iter().collect();
        files.sort_by_key(|f| f.db_name == "CURRENT");
        for f in files {
            let from = self.dir.join(&f.stored);
            let to = target.join(&f.db_name);
            let mut dst = fs.create(&to).map_err(|e| Error::io("create", &to, e))?;
            let (size, crc) = self.read_chunks(&from, |chunk| {
                dst.append(chunk).map_err(|e| Error::io("write", &to, e))
            })?;
            check_file(&from, f, size, crc)?;
            dst.sync().map_err(|e| Error::io("fsync", &to, e))?;
        }
        fs.sync_dir(target)
            .map_err(|e| Error::io("fsync", target, e))?;
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.sync_dir(parent)
                .map_err(|e| Error::io("fsync", parent, e))?;
        }
        Ok(())
    }

    /// Deletes every backup but the newest `keep`, then every file no remaining backup
    /// names. Returns the ids deleted.
    pub fn purge(&self, keep: usize) -> Result<Vec<u64>> {
        let _busy = crate::mutex::lock(&self.busy);
        let ids = self.ids()?;
        let gone: Vec<u64> = ids[..ids.len().saturating_sub(keep)].to_vec();
        for &id in &gone {
            self.remove_meta(id)?;
        }
        self.collect_garbage(&gone)?;
        Ok(gone)
    }

    /// Deletes backup `id` and the files no other backup names.
    pub fn delete(&self, id: u64) -> Result<()> {
        let _busy = crate::mutex::lock(&self.busy);
        self.meta(id)?;
        self.remove_meta(id)?;
        self.collect_garbage(&[id])
    }

    fn remove_meta(&self, id: u64) -> Result<()> {
        let meta_dir = self.dir.join("meta");
        let path = meta_dir.join(id.to_string());
        self.fs
            .remove(&path)
            .map_err(|e| Error::io("remove", &path, e))?;
        self.fs
            .sync_dir(&meta_dir)
            .map_err(|e| Error::io("fsync", &meta_dir, e))
    }

    /// Removes shared tables and private directories that no backup names, and what a
    /// backup interrupted before its meta file left behind (`gone`: backups just deleted,
    /// whose private directories a file system that lists no directories would not show).
    /// Reads every meta file first: a damaged one stops it before it removes anything.
    fn collect_garbage(&self, gone: &[u64]) -> Result<()> {
        let fs = self.fs.as_ref();
        let metas = self
            .ids()?
            .into_iter()
            .map(|id| self.meta(id))
            .collect::<Result<Vec<_>>>()?;
        let named: BTreeSet<&str> = metas
            .iter()
            .flat_map(|m| m.files.iter().map(|f| f.stored.as_str()))
            .collect();
        let kept: BTreeSet<String> = metas.iter().map(|m| m.id.to_string()).collect();
        let shared = self.dir.join("shared");
        for name in fs
            .list(&shared)
            .map_err(|e| Error::io("list", &shared, e))?
        {
            if !named.contains(format!("shared/{name}").as_str()) {
                let path = shared.join(&name);
                fs.remove(&path)
                    .map_err(|e| Error::io("remove", &path, e))?;
            }
        }
        // Private directories are named by id, staging ones `staging-ID`.
        let private = self.dir.join("private");
        let orphans = fs
            .list(&private)
            .map_err(|e| Error::io("list", &private, e))?
            .into_iter()
            .chain(gone.iter().map(u64::to_string))
            .filter(|name| name.parse::<u64>().is_ok() && !kept.contains(name))
            .map(|name| private.join(name));
        let staging = fs
            .list(&self.dir)
            .map_err(|e| Error::io("list", &self.dir, e))?
            .into_iter()
            .filter(|name| name.starts_with("staging-"))
            .map(|name| self.dir.join(name));
        for dir in orphans.chain(staging).collect::<Vec<_>>() {
            self.remove_tree(&dir)?;
        }
        let meta_dir = self.dir.join("meta");
        for name in fs
            .list(&meta_dir)
            .map_err(|e| Error::io("list", &meta_dir, e))?
        {
            if name.ends_with(".tmp") {
                let path = meta_dir.join(&name);
                fs.remove(&path)
                    .map_err(|e| Error::io("remove", &path, e))?;
            }
        }
        for d in [shared, private, meta_dir] {
            fs.sync_dir(&d).map_err(|e| Error::io("fsync", &d, e))?;
        }
        Ok(())
    }

    /// The ids of the backups whose meta files exist, ascending.
    fn ids(&self) -> Result<Vec<u64>> {
        let meta_dir = self.dir.join("meta");
        let mut ids: Vec<u64> = self
            .fs
            .list(&meta_dir)
            .map_err(|e| Error::io("list", &meta_dir, e))?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn meta(&self, id: u64) -> Result<Meta> {
        let path = self.dir.join("meta").join(id.to_string());
        if !self.fs.exists(&path) {
            return Err(Error::InvalidArgument(format!(
                "no backup {id} in {}",
                self.dir.display()
            )));
        }
        let bytes = self
            .fs
            .read_all(&path)
            .map_err(|e| Error::io("read", &path, e))?;
        let meta = Meta::decode(&path, &bytes)?;
        if meta.id != id {
            return Err(Error::corruption(
                &path,
                0,
                format!("names backup {}", meta.id),
            ));
        }
        Ok(meta)
    }

    /// Copies `from` to a new synced file `to`; returns its size and CRC-32C.
    fn copy(&self, from: &Path, to: &Path) -> Result<(u64, u32)> {
        let mut dst = self.fs.create(to).map_err(|e| Error::io("create", to, e))?;
        let (size, crc) = self.read_chunks(from, |chunk| {
            dst.append(chunk).map_err(|e| Error::io("write", to, e))
        })?;
        dst.sync().map_err(|e| Error::io("fsync", to, e))?;
        Ok((size, crc))
    }

    fn sync(&self, dir: &Path) -> Result<()> {
        self.fs
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, e))
    }

    /// A backup id never used in this directory: one past the newest backup and past every
    /// id handed out before (`meta/next`, made durable before the id is used).
    fn take_id(&self) -> Result<u64> {
        let fs = self.fs.as_ref();
        let meta_dir = self.dir.join("meta");
        let next_path = meta_dir.join("next");
        let recorded = if fs.exists(&next_path) {
            let bytes = fs
                .read_all(&next_path)
                .map_err(|e| Error::io("read", &next_path, e))?;
            std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .ok_or_else(|| Error::corruption(&next_path, 0, "not a backup id"))?
        } else {
            1
        };
        let id = recorded.max(self.ids()?.last().map_or(1, |last| last + 1));
        let tmp = meta_dir.join("next.tmp");
        let mut f = fs.create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        f.append(format!("{}\n", id + 1).as_bytes())
            .and_then(|()| f.sync())
            .map_err(|e| Error::io("write", &tmp, e))?;
        drop(f);
        fs.rename(&tmp, &next_path)
            .map_err(|e| Error::io("rename", &tmp, e))?;
        self.sync(&meta_dir)?;
        Ok(id)
    }

    /// The size and CRC-32C of a file, read in chunks.
    fn checksum(&self, path: &Path) -> Result<(u64, u32)> {
        self.read_chunks(path, |_| Ok(()))
    }

    /// Reads a file in chunks, handing each to `each`; returns its size and CRC-32C.
    fn read_chunks(
        &self,
        path: &Path,
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<(u64, u32)> {
        let file = self.fs.open(path).map_err(|e| Error::io("open", path, e))?;
        let size = file.size().map_err(|e| Error::io("stat", path, e))?;
        let mut crc = 0;
        let mut at = 0;
        while at < size {
            let len = (size - at).min(COPY_CHUNK as u64) as usize;
            let chunk = file
                .read_at(at, len)
                .map_err(|e| Error::io("read", path, e))?;
            crc = crc32c::crc32c_append(crc, &chunk);
            each(&chunk)?;
            at += len as u64;
        }
        Ok((size, crc))
    }

    /// Removes a directory of files (the only kind a backup makes), if it exists.
    fn remove_tree(&self, dir: &Path) -> Result<()> {
        let fs = self.fs.as_ref();
        if !fs.exists(dir) {
            return Ok(());
        }
        for name in fs.list(dir).map_err(|e| Error::io("list", dir, e))? {
            let path = dir.join(name);
            fs.remove(&path)
                .map_err(|e| Error::io("remove", &path, e))?;
        }
        fs.remove_dir(dir).map_err(|e| Error::io("remove", dir, e))
    }
}

fn check_file(path: &Path, f: &BackupFile, size: u64, crc: u32) -> Result<()> {
    if size != f.size || crc != f.crc {
        return Err(Error::corruption(
            path,
            0,
            format!(
                "{} bytes with checksum {crc:08x}; the backup recorded {} bytes with {:08x}",
                size, f.size, f.crc
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            id: 7,
            created_unix_secs: 1_764_000_000,
            files: vec![
                BackupFile {
                    db_name: "000012.sst".into(),
                    stored: "shared/000012_4096_1a2b3c4d.sst".into(),
                    size: 4096,
                    crc: 0x1a2b_3c4d,
                },
                BackupFile {
                    db_name: "CURRENT".into(),
                    stored: "private/7/CURRENT".into(),
                    size: 16,
                    crc: 5,
                },
            ],
        }
    }

    #[test]
    fn meta_round_trips() {
        let m = meta();
        let back = Meta::decode(Path::new("m"), m.encode().as_bytes()).unwrap();
        assert_eq!(back.id, 7);
        assert_eq!(back.created_unix_secs, 1_764_000_000);
        assert_eq!(back.files, m.files);
    }

    #[test]
    fn a_changed_meta_file_is_corruption() {
        let text = meta().encode();
        let flipped = text.replace("4096 1a2b", "4097 1a2b");
        assert!(matches!(
            Meta::decode(Path::new("m"), flipped.as_bytes()),
            Err(Error::Corruption { .. })
        ));
        let truncated = &text[..text.len() - 5];
        assert!(Meta::decode(Path::new("m"), truncated.as_bytes()).is_err());
    }

    #[test]
    fn names_that_leave_the_backup_are_refused() {
        let mut m = meta();
        m.files[1].stored = "private/7/../../../etc/passwd".into();
        assert!(matches!(
            Meta::decode(Path::new("m"), m.encode().as_bytes()),
            Err(Error::Corruption { .. })
        ));
        let mut m = meta();
        m.files[0].db_name = "../x.sst".into();
        assert!(Meta::decode(Path::new("m"), m.encode().as_bytes()).is_err());
        let mut m = meta();
        m.files[1].stored = "private/8/CURRENT".into();
        assert!(Meta::decode(Path::new("m"), m.encode().as_bytes()).is_err());
    }
}
