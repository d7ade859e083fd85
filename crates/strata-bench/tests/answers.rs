//! The comparison's answer check: engines that answer a workload differently fail the run.

use std::process::Command;

fn compare(engines: &str, benchmarks: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = Command::new(env!("CARGO_BIN_EXE_strata-bench"))
        .args([
            &format!("--compare={engines}"),
            "--rounds=1",
            "--num=5000",
            &format!("--benchmarks={benchmarks}"),
            "--db",
        ])
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
    assert!(text.contains("of 5000 found"), "{text}");
    assert!(text.contains("keys hashed"), "{text}");
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
