//! LevelDB through its C API (`leveldb/c.h`), built from source by `leveldb-sys`.

use std::ffi::{CStr, CString, c_char};
use std::path::Path;
use std::ptr;

use leveldb_sys::*;

use super::{Engine, Result, Settings};

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

    /// True while LevelDB's own rule would pick a compaction: four or more files in level 0,
    /// or a level L >= 1 over 10^L MB (its `VersionSet::Finalize` scores, from `leveldb.stats`).
    fn compaction_needed(&self) -> bool {
        let stats = self.property(c"leveldb.stats");
        stats.lines().any(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(level), Some(files), Some(mb)) = (
                cols.first().and_then(|c| c.parse::<i32>().ok()),
                cols.get(1).and_then(|c| c.parse::<u64>().ok()),
                cols.get(2).and_then(|c| c.parse::<f64>().ok()),
            ) else {
                return false;
            };
            match level {
                0 => files >= 4,
                l => mb * 1_048_576.0 > 10f64.powi(l) * 1_048_576.0,
            }
        })
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
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
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
        // SAFETY: freed once.
        unsafe { leveldb_free(v.cast()) };
        Ok(Some(len))
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        let mut err = ptr::null_mut();
        let wo = if sync { self.write_sync } else { self.write };
        // SAFETY: valid handles.
        unsafe { leveldb_delete(self.db, wo, key.as_ptr().cast(), key.len(), &mut err) };
        check(err)
    }
    fn scan(&self, reverse: bool, limit: u64, visit: &mut dyn FnMut(&[u8], usize)) -> Result<u64> {
        // SAFETY: the iterator is created, used while the database is open, and destroyed;
        // each key is read before the iterator moves.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            if reverse {
                leveldb_iter_seek_to_last(it);
            } else {
                leveldb_iter_seek_to_first(it);
            }
            let mut n = 0;
            while leveldb_iter_valid(it) != 0 && n < limit {
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = leveldb_iter_key(it, &mut kl);
                leveldb_iter_value(it, &mut vl);
                visit(std::slice::from_raw_parts(k.cast::<u8>(), kl), vl);
                n += 1;
                if reverse {
                    leveldb_iter_prev(it);
                } else {
                    leveldb_iter_next(it);
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
    fn seek(&self, key: &[u8]) -> Result<bool> {
        // SAFETY: as in `scan`.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, key.as_ptr().cast(), key.len());
            let valid = leveldb_iter_valid(it) != 0;
            leveldb_iter_destroy(it);
            Ok(valid)
        }
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // LevelDB's C API has no flush and no "compaction pending". The nearest: a manual
        // compaction of a range past every key, which flushes the memtable (CompactRange
        // always does) and finds no file to merge; then wait until its compaction rule
        // picks nothing and `leveldb.stats` stops changing (a running compaction changes it
        // when it ends).
        self.compact_range(Some(&[0xff; 32]), Some(&[0xff; 33]));
        let mut last = String::new();
        loop {
            let stats = self.property(c"leveldb.stats");
            if !self.compaction_needed() && stats == last {
                return Ok(());
            }
            last = stats;
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
    fn compact(&self) -> Result<()> {
        self.compact_range(None, None);
        Ok(())
    }
}
