//! The comparison's answer check: engines that answer a workload differently fail the run.

use std::process::Command;

fn compare(engines: &str, benchmarks: &str) -> (bool, String) {
    compare_with(engines, benchmarks, &[])
}

fn compare_with(engines: &str, benchmarks: &str, extra: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = Command::new(env!("CARGO_BIN_EXE_strata-bench"))
        .args([
            &format!("--compare={engines}"),
            "--rounds=1",
            "--num=5000",
            &format!("--benchmarks={benchmarks}"),
        ])
        .args(extra)
        .arg("--db")
        .arg(dir.path())
        .output()
        .expect("run strata-bench");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn engines_that_agree_pass() {
    let (ok, text) = compare(
        "strata,strata",
        "fillrandom,readrandom,readmissing,readseq,readreverse,seekrandom",
    );
    assert!(ok, "{text}");
    assert!(text.contains("of 5000 found, hashed"), "{text}");
    assert!(text.contains("entries, hashed"), "{text}");
    // Strata with and without its idle merge answer alike.
    let (ok, text) = compare("strata,strata-idle", "fillrandom,readrandom,readseq");
    assert!(ok, "{text}");
}

#[test]
fn an_engine_that_loses_keys_fails_the_lookups() {
    // Every 997th key (by a hash) never reaches the second engine: fillrandom's random keys
    // leave some of them among the 5,000 looked up.
    let (ok, text) = compare("strata,strata-wrong", "fillrandom,readrandom");
    assert!(!ok, "the run passed:\n{text}");
    assert!(
        text.contains("disagree") && text.contains("readrandom (round 1): strata answered"),
        "{text}"
    );
}

#[test]
fn an_engine_that_loses_keys_fails_the_scans() {
    for scan in ["readseq", "readreverse"] {
        let (ok, text) = compare("strata,strata-wrong", &format!("fillseq,{scan}"));
        assert!(!ok, "{scan} passed:\n{text}");
        assert!(
            text.contains(&format!("{scan} (round 1): strata answered 5000 entries")),
            "{text}"
        );
    }
}

// The wrong engine drops keys 373 and 488 of 0..5000 (the only two its rule picks there).

#[test]
fn a_scan_of_as_many_entries_but_other_keys_fails() {
    // Both scans stop at 1,000 entries; only the hash tells them apart.
    let (ok, text) = compare_with("strata,strata-wrong", "fillseq,readseq", &["--reads=1000"]);
    assert!(!ok, "the run passed:\n{text}");
    assert!(
        text.contains("strata answered 1000 entries, hashed")
            && text.contains("strata-wrong answered 1000 entries, hashed"),
        "{text}"
    );
}

#[test]
fn seeks_that_land_on_other_keys_fail() {
    // Every seek finds a key in both engines; a seek for 373 lands on 374 in the wrong one.
    let (ok, text) = compare_with(
        "strata,strata-wrong",
        "fillseq,seekrandom",
        &["--reads=20000"],
    );
    assert!(!ok, "the run passed:\n{text}");
    assert!(
        text.contains("strata answered 20000 of 20000 found")
            && text.contains("strata-wrong answered 20000 of 20000 found"),
        "{text}"
    );
}

// The stale engine keeps the first version of every 97th key: after `overwrite`, the keys
// of those that were overwritten answer a value of the right length but an older one.

#[test]
fn an_engine_that_answers_stale_values_fails_the_lookups() {
    for read in ["readrandom", "multireadrandom"] {
        let (ok, text) = compare("strata,strata-stale", &format!("fillseq,overwrite,{read}"));
        assert!(!ok, "{read} passed:\n{text}");
        // Both find every key: only the values' digests tell them apart.
        assert!(
            text.contains(&format!(
                "{read} (round 1): strata answered 5000 of 5000 found, hashed"
            )) && text.contains("strata-stale answered 5000 of 5000 found, hashed"),
            "{text}"
        );
    }
}

#[test]
fn an_engine_that_answers_stale_values_fails_the_scans() {
    for scan in ["readseq", "readreverse"] {
        let (ok, text) = compare("strata,strata-stale", &format!("fillseq,overwrite,{scan}"));
        assert!(!ok, "{scan} passed:\n{text}");
        assert!(
            text.contains(&format!(
                "{scan} (round 1): strata answered 5000 entries, hashed"
            )) && text.contains("strata-stale answered 5000 entries, hashed"),
            "{text}"
        );
    }
}

#[test]
fn stale_values_pass_where_nothing_was_overwritten() {
    // Without `overwrite` the stale engine holds what the other holds: the check is about
    // values, not about which engine ran.
    let (ok, text) = compare("strata,strata-stale", "fillseq,readrandom,readseq");
    assert!(ok, "{text}");
}

#[test]
fn engines_agree_whatever_the_writing_threads_order() {
    // Four threads write random keys, some the same ones: a key's value depends on the key
    // and the workload, not on which thread wrote it last.
    let (ok, text) = compare_with(
        "strata,strata",
        "fillrandom,overwrite,readrandom,multireadrandom,readseq",
        &["--threads=4"],
    );
    assert!(ok, "{text}");
    assert!(text.contains("entries, hashed"), "{text}");
}

#[test]
fn reads_after_readwhilewriting_are_not_compared() {
    // Its writer's values depend on timing: the reads after it answer alike only by chance.
    let (ok, text) = compare_with(
        "strata,strata",
        "fillseq,readwhilewriting,readrandom",
        &["--reads=2000"],
    );
    assert!(ok, "{text}");
}

#[test]
fn readwhilewriting_holds_its_writer_to_the_rate_limit() {
    // 100 KB/s: the writer waits until each put's bytes are due, so its rate cannot exceed
    // the limit by more than one put.
    let (ok, text) = compare_with(
        "strata",
        "fillseq,readwhilewriting",
        &["--reads=50000", "--benchmark_write_rate_limit=102400"],
    );
    assert!(ok, "{text}");
    assert!(text.contains("benchmark_write_rate_limit=102400"), "{text}");
    let rate: f64 = text
        .split("its writer put ")
        .nth(1)
        .and_then(|rest| rest.split(" entries at ").nth(1))
        .and_then(|rest| rest.split(" MB/s").next())
        .and_then(|mb| mb.trim().parse().ok())
        .unwrap_or_else(|| panic!("no writer rate in:\n{text}"));
    assert!(
        rate > 0.0 && rate <= 0.1 + 0.01,
        "the writer wrote {rate} MB/s:\n{text}"
    );
}
