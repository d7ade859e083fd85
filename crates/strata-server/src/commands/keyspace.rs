//! Reading and writing keys: through the hot-key cache and the writes of the `EXEC` this
//! thread runs, under the stripe locks of the keys.

use strata::WriteBatch;

use super::exec_state;
use super::{Ctx, Outcome, engine, write_opts};
use crate::shared::Shared;
use crate::store::{self, Kind, Value};

/// Reads an engine key's stored bytes through the hot-key cache. On a miss the engine is
/// read and the cache filled under the key's stripe lock, so that a concurrent write cannot
/// be overtaken by a stale fill.
pub(super) fn read_raw(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = exec_state::pending(key) {
        return Ok(v);
    }
    if !shared.cache.consult() {
        return shared.db.get(key).map_err(engine);
    }
    if let Some(v) = shared.cache.get(key) {
        return Ok(v);
    }
    let _stripe = lock_stripe(shared, key);
    let v = shared.db.get(key).map_err(engine)?;
    shared.cache.fill(key, &v);
    Ok(v)
}

/// Reads an engine key while the caller holds its stripe lock.
pub(crate) fn read_raw_locked(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = exec_state::pending(key) {
        return Ok(v);
    }
    if shared.cache.consult()
        && let Some(v) = shared.cache.get(key)
    {
        return Ok(v);
    }
    shared.db.get(key).map_err(engine)
}

/// The data of a stored string, read in place, unless expired at `now`; a key of another
/// kind is [`store::WRONGTYPE`] while it lives.
pub(crate) fn live_data(raw: &[u8], now: u64) -> Result<Option<&[u8]>, String> {
    match store::parse_stored(raw)? {
        (_, Some(t), _) if t <= now => Ok(None),
        (Kind::String, _, data) => Ok(Some(data)),
        _ => Err(store::WRONGTYPE.into()),
    }
}

/// The live value of any kind in stored bytes.
fn live(raw: Option<Vec<u8>>, now: u64) -> Result<Option<Value>, String> {
    let Some(raw) = raw else { return Ok(None) };
    let v = store::decode_value(&raw)?;
    Ok(v.is_live(now).then_some(v))
}

/// A live value that must be a string.
fn string(v: Option<Value>) -> Result<Option<Value>, String> {
    match v {
        Some(v) if v.kind != Kind::String => Err(store::WRONGTYPE.into()),
        v => Ok(v),
    }
}

impl<'a> Ctx<'a, '_> {
    /// The engine key of `key` in the connection's database.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        store::data_key(self.shared.databases.prefix(self.conn.db), key)
    }

    /// The live string of an engine key (`None` when absent or expired); a key of another
    /// kind is [`store::WRONGTYPE`].
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Value>, String> {
        string(self.get_any(key)?)
    }

    /// As [`Ctx::get`], for a caller that holds the key's stripe lock.
    pub(crate) fn get_locked(&self, key: &[u8]) -> Result<Option<Value>, String> {
        string(self.get_any_locked(key)?)
    }

    /// The live value of any kind of an engine key.
    pub(crate) fn get_any(&self, key: &[u8]) -> Result<Option<Value>, String> {
        live(read_raw(self.shared, key)?, self.now)
    }

    /// As [`Ctx::get_any`], for a caller that holds the key's stripe lock.
    pub(crate) fn get_any_locked(&self, key: &[u8]) -> Result<Option<Value>, String> {
        live(read_raw_locked(self.shared, key)?, self.now)
    }

    pub(crate) fn lock<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Vec<std::sync::MutexGuard<'a, ()>> {
        lock_stripes(self.shared, keys)
    }
}

/// Writes to make as one atomic batch. Requires: the caller holds the stripe lock of every
/// key written.
#[derive(Default)]
pub(crate) struct Writes {
    batch: WriteBatch,
    keys: Vec<Vec<u8>>,
    /// For each of `keys`, whether it was deleted (for keyspace notifications).
    deleted: Vec<bool>,
    /// Inside an `EXEC`, the same writes, engine key and stored bytes (`None` deletes).
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Inside an `EXEC`, the ranges deleted: elements of collections no key names any more.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Writes {
    /// Stores string `data` under an engine key; an expiry also enters the expiry index.
    pub(crate) fn put(&mut self, key: &[u8], data: &[u8], expires_at: Option<u64>) {
        self.put_value(key, Kind::String, data, expires_at);
    }

    /// Stores a value of `kind` under an engine key, as [`Writes::put`].
    pub(crate) fn put_value(
        &mut self,
        key: &[u8],
        kind: Kind,
        data: &[u8],
        expires_at: Option<u64>,
    ) {
        let stored = store::encode_stored(kind, data, expires_at);
        self.batch.put(key, &stored);
        let in_exec = exec_state::in_exec();
        if in_exec {
            self.ops.push((key.to_vec(), Some(stored)));
        }
        if let Some(t) = expires_at {
            let index = store::index_key(t, key);
            self.batch.put(&index, b"");
            if in_exec {
                self.ops.push((index, Some(Vec::new())));
            }
        }
        self.keys.push(key.to_vec());
        self.deleted.push(false);
    }

    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.batch.delete(key);
        if exec_state::in_exec() {
            self.ops.push((key.to_vec(), None));
        }
        self.keys.push(key.to_vec());
        self.deleted.push(true);
    }

    /// Deletes a key of the server's own (an expiry index entry, an element), not cached.
    pub(crate) fn delete_raw(&mut self, key: &[u8]) {
        self.batch.delete(key);
        if exec_state::in_exec() {
            self.ops.push((key.to_vec(), None));
        }
    }

    /// Stores bytes under a key of the server's own (an element), not cached.
    pub(crate) fn put_raw(&mut self, key: &[u8], value: &[u8]) {
        self.batch.put(key, value);
        if exec_state::in_exec() {
            self.ops.push((key.to_vec(), Some(value.to_vec())));
        }
    }

    /// Deletes the keys in `[lo, hi)`: the elements of a collection whose header is deleted
    /// or replaced in the same batch, which nothing reads again.
    pub(crate) fn delete_range(&mut self, lo: &[u8], hi: &[u8]) {
        self.batch.delete_range(lo, hi);
        if exec_state::in_exec() {
            self.ranges.push((lo.to_vec(), hi.to_vec()));
        }
    }

    /// Deletes the key of a value of any kind: with a collection, its elements.
    pub(crate) fn delete_value(&mut self, key: &[u8], v: &Value) {
        self.delete(key);
        if v.kind != Kind::String {
            let version = store::Header::decode(&v.data).version;
            for (lo, hi) in store::collection_ranges(v.kind, version) {
                self.delete_range(&lo, &hi);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    pub(crate) fn commit(mut self, shared: &Shared) -> Outcome {
        if crate::notify::on(shared) {
            let now = shared.clock.now_ms();
            let prior = crate::notify::wants_prior(shared);
            for (k, &deleted) in self.keys.iter().zip(&self.deleted) {
                // What the key held before the batch (asked only for `new` and `expired`).
                let (mut created, mut expired) = (false, false);
                if prior {
                    let old = read_raw_locked(shared, k)?
                        .map(|raw| store::decode_value(&raw))
                        .transpose()?;
                    let live = old.as_ref().is_some_and(|v| v.is_live(now));
                    created = !deleted && !live;
                    expired = old.is_some() && !live;
                }
                crate::notify::record(crate::notify::Written {
                    key: k.clone(),
                    deleted,
                    created,
                    expired,
                });
            }
        }
        if exec_state::hold(&mut self.ops, &self.ranges, &self.keys) {
            return Ok(());
        }
        // A written key leaves the cache (the next read fills it): cheaper than copying every
        // written value in, and right whatever the write's outcome. It leaves before the
        // write, under the stripe locks a refill takes, so that no reader sees the cached old
        // value of one key and the engine's new value of another.
        for k in &self.keys {
            shared.cache.remove(k);
        }
        shared
            .db
            .write(self.batch, write_opts(shared))
            .map_err(engine)?;
        shared.notify_written(&self.keys);
        Ok(())
    }
}

/// Locks the stripe of one key, unless the `EXEC` running on this thread holds it: the read
/// path's cache fill, without the vector [`lock_stripes`] makes.
fn lock_stripe<'a>(shared: &'a Shared, key: &[u8]) -> Option<std::sync::MutexGuard<'a, ()>> {
    let i = shared.stripe(key);
    if exec_state::held_by_this_thread(i) {
        return None;
    }
    Some(shared.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
}

/// Locks the stripes of `keys` in a fixed order (no deadlock between multi-key commands).
/// Inside an `EXEC`, the stripes it already holds are not taken again.
pub(crate) fn lock_stripes<'a, 'k>(
    shared: &'a Shared,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Vec<std::sync::MutexGuard<'a, ()>> {
    let mut idx: Vec<usize> = keys.into_iter().map(|k| shared.stripe(k)).collect();
    idx.sort_unstable();
    idx.dedup();
    idx.retain(|&i| !exec_state::held_by_this_thread(i));
    idx.into_iter()
        .map(|i| shared.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
        .collect()
}
