//! The commands' handlers, made from the command table's rows (`table.rs`), in the order
//! of [`super::spec::SPECS`].

use super::table::command_rows;
use super::{
    Handler, auth, blocking, client, config, functions, geo, hashes, info, keys, latency, lists,
    monitor, persistence, pubsub, replication, scripting, server, sets, sort, streams, strings,
    transaction, xclaim, xgroups, xinfo, zalgebra, zrange, zsets,
};

macro_rules! handlers {
    ($((
        $name:literal, $arity:expr, $flags:expr, [$($cat:literal),*], $keys:expr, $run:path
    )),* $(,)?) => {
        /// Row `i`'s handler is the handler of [`super::spec::SPECS`]`[i]`.
        pub(crate) static HANDLERS: &[Handler] = &[$($run),*];
    };
}

command_rows!(handlers);
