//! [`WalListener`]: what the engine tells of each write group as it is logged.

use crate::batch::WriteBatch;

/// Told of every write group once it is in the WAL (see
/// [`Options::wal_listener`](crate::Options::wal_listener)); a replica's primary follows its
/// writes through it.
pub trait WalListener: Send + Sync {
    /// A group is in the WAL: `batch`, its first operation at sequence number `first_seq`
    /// ([`WriteBatch::to_record`] makes of the two the WAL's record). Called by the group's
    /// leader, in commit order, before the group's writers return and while the next group
    /// waits: copy what is needed and hand it off.
    fn logged(&self, first_seq: u64, batch: &WriteBatch);
}
