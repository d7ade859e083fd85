//! What the `strata` binary's test files share.
#![allow(dead_code)]

use std::process::Command;

/// The `--merge-policy` flag for the policy `STRATA_MERGE_POLICY` names (`leveling`,
/// `tiering` or `lazy`; none when unset), so that the binary's tests run under each
/// (`scripts/test.sh`). A name it does not know fails the test.
pub fn merge_policy_flags() -> Vec<&'static str> {
    match std::env::var("STRATA_MERGE_POLICY").as_deref() {
        Err(_) => vec![],
        Ok("leveling") => vec!["--merge-policy", "leveling"],
        Ok("tiering") => vec!["--merge-policy", "tiering"],
        Ok("lazy") => vec!["--merge-policy", "lazy-leveling"],
        Ok(other) => panic!("STRATA_MERGE_POLICY={other}: leveling, tiering or lazy"),
    }
}

/// The `strata` binary under test, with the merge policy's flag.
pub fn strata_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(merge_policy_flags());
    cmd
}
