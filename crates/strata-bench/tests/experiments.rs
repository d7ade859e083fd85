//! The seed experiments at their smallest: they write their results and figures, and an
//! engine that answers wrongly fails them.

use std::path::Path;
use std::process::Command;

/// Runs `strata-bench experiment ARGS` with its output in `out`; returns success and what
/// it printed.
fn experiment(out: &Path, args: &[&str]) -> (bool, String) {
    let db = out.join("db");
    let run = Command::new(env!("CARGO_BIN_EXE_strata-bench"))
        .arg("experiment")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--db")
        .arg(&db)
        .output()
        .expect("run strata-bench");
    let text =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    (run.status.success(), text)
}

/// The CSV's rows as maps from column to cell.
fn rows_of(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut csv = csv::Reader::from_path(path).expect("results CSV");
    let headers = csv.headers().expect("header").clone();
    csv.records()
        .map(|r| {
            let r = r.expect("row");
            headers
                .iter()
                .map(String::from)
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

fn number(row: &std::collections::HashMap<String, String>, column: &str) -> f64 {
    row[column]
        .parse()
        .unwrap_or_else(|_| panic!("{column}: {:?}", row[column]))
}

#[test]
fn growth_writes_every_period_of_every_engine_and_they_agree() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "growth",
        "--scale=0.0005",
        "--periods=4",
        "--gets=3000",
        "--scans=300",
        "--engines=strata,strata-btree",
    ];
    let (ok, text) = experiment(dir.path(), &args);
    assert!(ok, "{text}");
    assert!(text.contains("every engine found the same keys"), "{text}");
    let rows = rows_of(&dir.path().join("growth.csv"));
    assert_eq!(rows.len(), 8);
    for period in 1..=4 {
        let of = |engine: &str| {
            rows.iter()
                .find(|r| r["engine"] == engine && r["period"] == period.to_string())
                .unwrap_or_else(|| panic!("{engine} period {period}"))
        };
        let (flat, btree) = (of("strata"), of("strata-btree"));
        // 33,554 entries in 4 periods of 8,388 random keys over [1, 33,552]: the gets find
        // more keys as the periods go on, and both indexes find the same ones.
        assert_eq!(flat["gets_found"], btree["gets_found"]);
        assert_eq!(number(flat, "entries"), 8388.0 * period as f64);
        assert!(number(flat, "gets_found") > 0.0);
        assert_eq!(flat["entries_scanned"], btree["entries_scanned"]);
        let scanned = number(flat, "entries_scanned");
        assert!(scanned > 0.0 && scanned <= 300.0 * 16.0, "{scanned}");
        for r in [flat, btree] {
            assert!(number(r, "put_ops_per_sec") > 0.0);
            assert!(number(r, "get_ops_per_sec") > 0.0);
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("growth.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("strata-btree"),
        "{svg:.200}"
    );
    assert!(dir.path().join("growth.txt").exists());
    // The databases are gone.
    assert!(!dir.path().join("db").exists());
}

#[test]
fn growth_fails_when_an_engine_loses_keys() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "growth",
        "--scale=0.0005",
        "--periods=2",
        "--gets=3000",
        "--scans=100",
        "--engines=strata,strata-wrong",
    ];
    let (ok, text) = experiment(dir.path(), &args);
    assert!(!ok, "the run passed:\n{text}");
    assert!(
        text.contains("answers differ: period 1: strata found"),
        "{text}"
    );
}

#[test]
fn seven_tasks_reports_every_task_and_checks_the_answers() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "seven-tasks",
        "--counts=500,3000",
        "--datasets=random",
        "--engines=strata",
    ];
    let (ok, text) = experiment(dir.path(), &args);
    assert!(ok, "{text}");
    let rows = rows_of(&dir.path().join("seven-tasks.csv"));
    let tasks = [
        "fillseq",
        "fillrandom",
        "overwrite",
        "readseq",
        "readrandom",
        "deleteseq",
        "deleterandom",
    ];
    for n in ["500", "3000"] {
        for task in tasks {
            let row = rows
                .iter()
                .find(|r| r["task"] == task && r["entries"] == n)
                .unwrap_or_else(|| panic!("{task} at {n}"));
            assert!(number(row, "micros_per_entry") > 0.0, "{row:?}");
        }
    }
    assert_eq!(rows.len(), 14);

    // Strata dropping every 997th key fails the sequential read.
    let (ok, text) = experiment(
        dir.path(),
        &[
            "seven-tasks",
            "--counts=3000",
            "--datasets=random",
            "--engines=strata-wrong",
        ],
    );
    assert!(!ok, "the run passed:\n{text}");
    assert!(
        text.contains("strata-wrong: readseq read") && text.contains("not the 3000 keys"),
        "{text}"
    );
}

#[test]
fn flodb_runs_the_asked_share_of_updates_on_every_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "flodb",
        "--threads=1,2",
        "--updates=0,50,100",
        "--initial=2000",
        "--duration=0.2",
        "--engines=strata",
    ];
    let (ok, text) = experiment(dir.path(), &args);
    assert!(ok, "{text}");
    let rows = rows_of(&dir.path().join("flodb.csv"));
    assert_eq!(rows.len(), 6);
    for r in &rows {
        let (reads, updates) = (number(r, "reads_per_sec"), number(r, "updates_per_sec"));
        let share = updates / (reads + updates);
        match r["update_percent"].as_str() {
            "0" => assert_eq!(updates, 0.0, "{r:?}"),
            "100" => assert_eq!(reads, 0.0, "{r:?}"),
            _ => assert!((0.45..0.55).contains(&share), "{r:?}"),
        }
        assert!(number(r, "ops_per_sec") > 0.0, "{r:?}");
    }
    // With one writer, the writer's updates and the reader's reads both go on.
    let (ok, text) = experiment(
        dir.path(),
        &[
            "flodb",
            "--threads=2",
            "--one_writer",
            "--initial=2000",
            "--duration=0.2",
            "--engines=strata",
        ],
    );
    assert!(ok, "{text}");
    let one = rows_of(&dir.path().join("flodb.csv"));
    assert_eq!(one.len(), 1);
    assert!(number(&one[0], "reads_per_sec") > 0.0 && number(&one[0], "updates_per_sec") > 0.0);
}

#[test]
fn policies_writes_less_under_tiering_and_keeps_each_policys_shape() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "policies",
        "--num=60000",
        "--updates=30000",
        "--lookups=2000",
        "--ratios=4",
        "--write_buffer_size=65536",
        "--engines=strata",
    ];
    let (ok, text) = experiment(dir.path(), &args);
    assert!(ok, "{text}");
    let rows = rows_of(&dir.path().join("policies.csv"));
    let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str()).collect();
    assert_eq!(policies, ["leveling", "tiering", "lazy-leveling"], "{text}");
    let runs = |r: &std::collections::HashMap<String, String>| -> Vec<usize> {
        r["runs_per_level"]
            .split(' ')
            .map(|n| n.parse().unwrap())
            .collect()
    };
    // Every design leaves data below level 0, and lazy leveling's deepest level is one run.
    for row in &rows {
        assert!(runs(row)[1..].iter().any(|&n| n > 0), "{row:?}");
    }
    assert_eq!(runs(&rows[2]).last(), Some(&1), "{:?}", rows[2]);
    let amp = |i: usize| number(&rows[i], "write_amplification");
    assert!(amp(0) > 1.0, "{text}");
    assert!(
        amp(1) < 0.8 * amp(0),
        "tiering should write less than leveling: {text}"
    );
    for r in &rows {
        // The updates' flushes alone write each byte once, and the live data stays the size
        // it was, so the tree holds at least every byte put. Whether older versions are
        // still there when the updates end depends on when compactions ran, so this does
        // not compare the space with the space after the fill.
        assert!(number(r, "update_write_amplification") >= 1.0, "{r:?}");
        assert!(number(r, "space_after_updates") >= 1.0, "{r:?}");
        assert!(number(r, "space_amplification") >= 1.0, "{r:?}");
    }
}
