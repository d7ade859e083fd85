//! [`WalListener`]: what the engine tells of each write group as it is logged.

/// Told of every write group once it is in the WAL (see
/// [`Options::wal_listener`](crate::Options::wal_listener)); a replica's primary follows its
/// writes through it.
pub trait WalListener: Send + Sync {
    /// A group is in the WAL. `record` is its batch as
    /// [`WriteBatch::from_record`](crate::WriteBatch::from_record) reads it; its first
    /// operation has sequence number `first_seq`. Called by the group's leader, in commit
    /// order, before the group's writers return and while the next group waits: copy what is
    /// needed and hand it off.
    fn logged(&self, first_seq: u64, record: &[u8]);
}
