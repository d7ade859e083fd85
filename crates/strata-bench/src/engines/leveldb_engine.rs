//! LevelDB through its C API (`leveldb/c.h`), built from source by `leveldb-sys`.

use std::ffi::{CStr, CString, c_char};
use std::path::Path;
use std::ptr;

use leveldb_sys::*;

use super::{Engine, Result, Seen, Settings, Start};

pub struct LevelEngine {
    db: *mut leveldb_t,
    options: *mut leveldb_options_t,
    cache: *mut leveldb_cache_t,
    filter: *mut leveldb_filterpolicy_t,
    read: *mut leveldb_readoptions_t,
    write: *mut leveldb_writeoptions_t,
    write_sync: *mut leveldb_writeoptions_t,
}

// SAFETY: LevelDB's `DB` is safe for concurrent use from many threads (its documented
// contract); the option objects are only read after construction.
unsafe impl Send for LevelEngine {}
// SAFETY: as above.
unsafe impl Sync for LevelEngine {}

/// The version of the LevelDB sources built in, as LevelDB reports it.
pub fn version() -> String {
    // SAFETY: plain getters of constants.
    unsafe { format!("{}.{}", leveldb_major_version(), leveldb_minor_version()) }
}

/// Turns LevelDB's error out-parameter into a `Result`, freeing the message.
fn check(err: *mut c_char) -> Result<()> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB sets `err` to a NUL-terminated malloc'd string.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: freed once, with LevelDB's allocator.
    unsafe { leveldb_free(err.cast()) };
    Err(msg)
}

impl LevelEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        if s.compression != "none" {
            return Err("leveldb: only `none` compression is compared here".into());
        }
        let name = CString::new(dir.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: plain calls of the C API with valid arguments; every object is destroyed
        // in Drop.
        unsafe {
            let options = leveldb_options_create();
            leveldb_options_set_create_if_missing(options, 1);
            leveldb_options_set_write_buffer_size(options, s.write_buffer_size);
            leveldb_options_set_block_size(options, s.block_size);
            leveldb_options_set_compression(options, Compression::No);
            let cache = leveldb_cache_create_lru(s.cache_size);
            leveldb_options_set_cache(options, cache);
            let filter = leveldb_filterpolicy_create_bloom(s.bloom_bits as i32);
            leveldb_options_set_filter_policy(options, filter);
            leveldb_options_set_max_open_files(options, 10_000);
            let mut err: *mut c_char = ptr::null_mut();
            let db = leveldb_open(options, name.as_ptr(), &mut err);
            check(err)?;
            let write_sync = leveldb_writeoptions_create();
            leveldb_writeoptions_set_sync(write_sync, 1);
            Ok(LevelEngine {
                db,
                options,
                cache,
                filter,
                read: leveldb_readoptions_create(),
                write: leveldb_writeoptions_create(),
                write_sync,
            })
        }
    }

    /// A property's text (`leveldb.stats`, `leveldb.num-files-at-level0`, ...).
    fn property(&self, name: &CStr) -> String {
        // SAFETY: the property name is NUL-terminated; the result is freed below.
        let v = unsafe { leveldb_property_value(self.db, name.as_ptr()) };
        if v.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated malloc'd string from LevelDB.
        let text = unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned();
        // SAFETY: freed once.
        unsafe { leveldb_free(v.cast()) };
        text
    }

    /// True while LevelDB's own rule would pick a compaction (`VersionSet::Finalize`): four
    /// or more files in level 0, or a level L >= 1 at or over 10^L MiB, from the exact file
    /// sizes `leveldb.sstables` lists. While a compaction runs, the version it will replace
    /// still scores at least 1, so this also covers a running compaction.
    fn compaction_needed(&self) -> bool {
        let tables = self.property(c"leveldb.sstables");
        let (mut level, mut files, mut bytes) = (None::<i32>, [0u64; 7], [0u64; 7]);
        for line in tables.lines() {
            if let Some(rest) = line.strip_prefix("--- level ") {
                level = rest.trim_end_matches(" ---").trim().parse().ok();
                continue;
            }
            // " 12:2125418['key' @ 1 : 1 .. 'key' @ 9 : 1]": file number, then its size.
            let size = line
                .trim()
                .split_once(':')
                .and_then(|(_, rest)| rest.split('[').next()?.parse::<u64>().ok());
            if let (Some(l), Some(size)) = (level, size)
                && let Some(i) = usize::try_from(l).ok().filter(|&i| i < 7)
            {
                files[i] += 1;
                bytes[i] += size;
            }
        }
        files[0] >= 4 || (1..7).any(|l| bytes[l] as f64 >= 10f64.powi(l as i32) * 1_048_576.0)
    }

    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) {
        let (b, bl) = begin.map_or((ptr::null(), 0), |b| (b.as_ptr().cast(), b.len()));
        let (e, el) = end.map_or((ptr::null(), 0), |e| (e.as_ptr().cast(), e.len()));
        // SAFETY: valid handle; the bounds outlive the call.
        unsafe { leveldb_compact_range(self.db, b, bl, e, el) };
    }
}

impl Drop for LevelEngine {
    fn drop(&mut self) {
        // SAFETY: each object was created in `open` and is destroyed once, the database first.
        unsafe {
            leveldb_close(self.db);
            leveldb_options_destroy(self.options);
            leveldb_cache_destroy(self.cache);
            leveldb_filterpolicy_destroy(self.filter);
            leveldb_readoptions_destroy(self.read);
            leveldb_writeoptions_destroy(self.write);
            leveldb_writeoptions_destroy(self.write_sync);
        }
    }
}

impl Engine for LevelEngine {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let mut err = ptr::null_mut();
        let wo = if sync { self.write_sync } else { self.write };
        // SAFETY: valid handles; LevelDB copies the key and value.
        unsafe {
            leveldb_put(
                self.db,
                wo,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        check(err)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Seen>> {
        let mut err = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: valid handles; the returned buffer is malloc'd and freed below.
        let v = unsafe {
            leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            )
        };
        check(err)?;
        if v.is_null() {
            return Ok(None);
        }
        // SAFETY: LevelDB returned `len` bytes at `v`, read here before the buffer is freed.
        let seen = Seen::of(unsafe { std::slice::from_raw_parts(v.cast::<u8>(), len) });
        // SAFETY: freed once.
        unsafe { leveldb_free(v.cast()) };
        Ok(Some(seen))
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        let mut err = ptr::null_mut();
        let wo = if sync { self.write_sync } else { self.write };
        // SAFETY: valid handles.
        unsafe { leveldb_delete(self.db, wo, key.as_ptr().cast(), key.len(), &mut err) };
        check(err)
    }
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        // SAFETY: the iterator is created, used while the database is open, and destroyed;
        // each key is read before the iterator moves.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            match start {
                Start::First => leveldb_iter_seek_to_first(it),
                Start::Last => leveldb_iter_seek_to_last(it),
                Start::Key(k) => leveldb_iter_seek(it, k.as_ptr().cast(), k.len()),
            }
            let mut n = 0;
            while leveldb_iter_valid(it) != 0 && n < limit {
                // leveldb-sys declares these out-parameters `*const`; LevelDB writes them.
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = leveldb_iter_key(it, (&raw mut kl).cast_const());
                let v = leveldb_iter_value(it, (&raw mut vl).cast_const());
                visit(
                    std::slice::from_raw_parts(k.cast::<u8>(), kl),
                    std::slice::from_raw_parts(v.cast::<u8>(), vl),
                );
                n += 1;
                match start {
                    Start::Last => leveldb_iter_prev(it),
                    _ => leveldb_iter_next(it),
                }
            }
            // leveldb-sys declares the out-parameter `*const *const`; LevelDB writes through it.
            let mut err: *const c_char = ptr::null();
            leveldb_iter_get_error(it, (&mut err as *mut *const c_char).cast_const());
            leveldb_iter_destroy(it);
            check(err.cast_mut())?;
            Ok(n)
        }
    }
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool> {
        // SAFETY: as in `scan`.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, key.as_ptr().cast(), key.len());
            let valid = leveldb_iter_valid(it) != 0;
            if valid {
                let mut kl = 0usize;
                let k = leveldb_iter_key(it, (&raw mut kl).cast_const());
                landed(std::slice::from_raw_parts(k.cast::<u8>(), kl));
            }
            leveldb_iter_destroy(it);
            Ok(valid)
        }
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // LevelDB's C API has no flush and no "compaction pending". The nearest: a manual
        // compaction of a range past every key, which flushes the memtable (CompactRange
        // always does) and finds no file to merge; then wait until its compaction rule
        // picks nothing.
        self.compact_range(Some(&[0xff; 32]), Some(&[0xff; 33]));
        while self.compaction_needed() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }
    fn compact(&self) -> Result<()> {
        self.compact_range(None, None);
        self.wait_for_compaction()
    }
}
