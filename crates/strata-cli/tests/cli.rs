//! The `strata` binary, run as a user runs it.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn strata(args: &[&str]) -> Output {
    common::strata_command().args(args).output().unwrap()
}

fn strata_stdin(args: &[&str], input: &str) -> Output {
    run_with_input(common::strata_command().args(args), input.as_bytes())
}

/// `strata` with the flags given and no others: for the tests that choose the merge policy.
fn strata_as_given(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap()
}

fn strata_as_given_stdin(args: &[&str], input: &str) -> Output {
    run_with_input(
        Command::new(env!("CARGO_BIN_EXE_strata")).args(args),
        input.as_bytes(),
    )
}

/// Runs `cmd` with `input` on its standard input and collects its output.
fn run_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn db_dir() -> (tempfile::TempDir, String) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("db").to_str().unwrap().to_string();
    (t, d)
}

#[test]
fn put_get_del_scan_round_trip_with_escapes_hex_and_json() {
    let (_t, db) = db_dir();
    assert!(strata(&["put", &db, "apple", "red"]).status.success());
    assert!(
        strata(&["put", &db, r#""bin\x00key""#, r#""v\xff""#])
            .status
            .success()
    );
    let o = strata(&["get", &db, "apple"]);
    assert_eq!(stdout(&o), "red\n");
    let o = strata(&["get", &db, r#""bin\x00key""#]);
    assert_eq!(stdout(&o), "v\\xff\n");
    let o = strata(&["get", &db, "--hex", "62696e006b6579"]);
    assert_eq!(stdout(&o), "76ff\n");
    let o = strata(&["scan", &db]);
    assert_eq!(stdout(&o), "apple\tred\nbin\\x00key\tv\\xff\n");
    let o = strata(&["scan", &db, "--json", "--reverse", "--limit", "1"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["key"], "bin\\x00key");
    assert!(strata(&["del", &db, "apple"]).status.success());
    let o = strata(&["get", &db, "apple"]);
    assert_eq!(o.status.code(), Some(1), "a missing key exits 1");
    assert!(stderr(&o).contains("not found"));
}

#[test]
fn put_from_stdin_loads_tab_separated_pairs() {
    let (_t, db) = db_dir();
    let input: String = (0..2500)
        .map(|i| format!("key{i:05}\tvalue{i}\n"))
        .collect();
    let o = strata_stdin(&["put", &db, "--from-stdin"], &input);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = strata(&["scan", &db, "key01000", "key01003"]);
    assert_eq!(
        stdout(&o),
        "key01000\tvalue1000\nkey01001\tvalue1001\nkey01002\tvalue1002\n"
    );
    let o = strata_stdin(&["put", &db, "--from-stdin"], "no tab here\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("line 1"));
}

#[test]
fn errors_have_clear_messages_and_exit_codes() {
    let (_t, db) = db_dir();
    let o = strata(&["get", &db, "k"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let o = strata(&["scan", "/nonexistent/strata/db"]);
    assert_eq!(o.status.code(), Some(1));
    let o = strata(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    let o = strata(&["put", &db]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("KEY and VALUE"));
    let o = strata(&["get", &db, "--hex", "zz"]);
    assert_eq!(o.status.code(), Some(1));
    let o = strata(&["check", "/nonexistent/dir"]);
    assert_eq!(o.status.code(), Some(1));
    let o = strata(&["inspect-file", "/etc/hostname"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a Strata file"));
    for sub in [
        "shell",
        "get",
        "put",
        "del",
        "scan",
        "import",
        "inspect",
        "inspect-file",
        "check",
        "stats",
    ] {
        let o = strata(&[sub, "--help"]);
        assert!(o.status.success(), "{sub} --help");
        assert!(stdout(&o).contains("Usage"), "{sub} --help");
    }
}

#[test]
fn shell_runs_a_script_from_stdin() {
    let (_t, db) = db_dir();
    let script = format!(
        "open {db}\nput a 1\nput \"b c\" \"two\\x00\"\nput d 4\nget a\nget \"b c\"\nget zz\n\
         scan a z\nrscan a z 2\ndel a\nget a\nbogus\nput onlykey\nindex btree\nfilter partitioned\n\
         filter some\nflush\ncompact\nget d\nclose\nget d\nquit\n"
    );
    let o = strata_stdin(&["shell"], &script);
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = format!(
        "opened {db}\nok\nok\nok\n1\ntwo\\x00\n(not found)\n\
         a    1\nb c  two\\x00\nd    4\n(3 entries)\n\
         d    4\nb c  two\\x00\n(2 shown; more remain, give a larger limit)\n\
         ok\n(not found)\n\
         error: unknown command \"bogus\" (type `help`)\n\
         error: usage: put <key> <value>\n\
         new SST files get a BTree index; `compact` rewrites the old ones\n\
         new SST files get a Partitioned filter; `compact` rewrites the old ones\n\
         error: unknown filter \"some\" (whole or partitioned)\n\
         ok\nok\n4\nclosed\n\
         error: no database is open (use `open <dir>`)\n"
    );
    assert_eq!(stdout(&o), expected);
}

#[test]
fn import_a_csv_with_quotes_and_newlines_then_count_it_back() {
    let (t, db) = db_dir();
    let csv = t.path().join("videos.csv");
    let mut f = std::fs::File::create(&csv).unwrap();
    writeln!(f, "video_id,title,views").unwrap();
    let rows = 100_000;
    for i in 0..rows {
        match i % 3 {
            0 => writeln!(f, "vid{i:06},\"A title, with a comma\",{i}").unwrap(),
            1 => writeln!(f, "vid{i:06},\"two\nlines\",{i}").unwrap(),
            _ => writeln!(f, "vid{i:06},plain title {i},{i}").unwrap(),
        }
    }
    // Bad row: too few fields. Duplicate key: last wins.
    writeln!(f, "lonely").unwrap();
    writeln!(f, "vid000002,replaced,0").unwrap();
    drop(f);
    let o = strata(&[
        "import",
        &db,
        csv.to_str().unwrap(),
        "--key",
        "video_id",
        "--value",
        "title",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("imported {} of {} rows", rows + 1, rows + 2)),
        "{out}"
    );
    assert!(out.contains("1 duplicate keys"), "{out}");
    assert!(out.contains("1 bad"), "{out}");
    assert!(stderr(&o).contains("bad row at line"), "{}", stderr(&o));
    let o = strata(&["scan", &db, "--json"]);
    assert_eq!(stdout(&o).lines().count(), rows);
    assert_eq!(
        stdout(&strata(&["get", &db, "vid000000"])),
        "A title, with a comma\n"
    );
    assert_eq!(
        stdout(&strata(&["get", &db, "vid000001"])),
        "two\\x0alines\n"
    );
    assert_eq!(stdout(&strata(&["get", &db, "vid000002"])), "replaced\n");
    // Several value columns are joined; --on-error abort stops and exits 1.
    let (_t2, db2) = db_dir();
    let o = strata(&[
        "import",
        &db2,
        csv.to_str().unwrap(),
        "--key",
        "0",
        "--value",
        "title,views",
        "--separator",
        "|",
        "--on-error",
        "abort",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&strata(&["get", &db2, "vid000005"])),
        "plain title 5|5\n"
    );
    let o = strata(&[
        "import",
        &db2,
        csv.to_str().unwrap(),
        "--key",
        "nope",
        "--value",
        "title",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no column \"nope\""));
}

fn first_sst(db: &str) -> std::path::PathBuf {
    std::fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .unwrap()
}

#[test]
fn inspect_stats_and_check_find_a_flipped_byte() {
    let (t, db) = db_dir();
    let input: String = (0..5000)
        .map(|i| format!("k{i:05}\t{}\n", "v".repeat(50)))
        .collect();
    assert!(
        strata_stdin(&["put", &db, "--from-stdin"], &input)
            .status
            .success()
    );
    // A reopen flushes the replayed WAL into an SST.
    assert!(strata(&["get", &db, "k00001"]).status.success());
    let svg = t.path().join("tree.svg");
    let o = strata(&["inspect", &db, "--svg", svg.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("L0: 1 files"), "{}", stdout(&o));
    assert!(stdout(&o).contains("k00000 .. k04999"));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg") && picture.contains("<rect") && picture.contains("L0: 1 files")
    );
    let o = strata(&["stats", &db]);
    assert!(stdout(&o).contains("space amplification"), "{}", stdout(&o));
    // The policy the tests run under (`STRATA_MERGE_POLICY`) is the one the binary runs.
    let policy = common::merge_policy_flags()
        .last()
        .copied()
        .unwrap_or("leveling");
    assert!(
        stdout(&o).contains(&format!("merge policy      {policy} with size ratio 10")),
        "{}",
        stdout(&o)
    );
    // Properties by LevelDB's and RocksDB's names: the one table of 5,000 keys.
    let o = strata(&[
        "stats",
        &db,
        "--property",
        "rocksdb.estimate-num-keys",
        "--property",
        "leveldb.num-files-at-level0",
        "--property",
        "leveldb.sstables",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let number: u64 = first_sst(&db)
        .file_stem()
        .and_then(|n| n.to_str()?.parse().ok())
        .unwrap();
    assert!(
        stdout(&o).starts_with(&format!(
            "rocksdb.estimate-num-keys: 5000\nleveldb.num-files-at-level0: 1\n\
             leveldb.sstables:\n--- level 0 ---\n {number}:"
        )),
        "{}",
        stdout(&o)
    );
    let o = strata(&["stats", &db, "--property", "leveldb.nothing"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown property \"leveldb.nothing\""));
    let o = strata(&["check", &db]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("ok:"));
    let sst = first_sst(&db);
    let o = strata(&["inspect-file", sst.to_str().unwrap(), "--entries"]);
    assert!(
        stdout(&o).contains("strata.entries: 5000"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("PUT seq"));
    // Flip one byte inside a data block.
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[1000] ^= 0x20;
    std::fs::write(&sst, bytes).unwrap();
    let o = strata(&["check", &db]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("DAMAGED") && out.contains(sst.file_name().unwrap().to_str().unwrap()),
        "{out}"
    );
    assert!(out.contains("offset"), "{out}");
    assert!(Path::new(&db).exists());
}

/// Regression: the interactive shell (standard input a terminal) panicked at start, loading
/// its history with rustyline built without file history. `script` gives it a terminal.
#[test]
fn interactive_shell_starts_and_leaves_on_ctrl_d() {
    if Command::new("script").arg("--version").output().is_err() {
        // CI installs `script` and sets the switch, so that there the test cannot skip.
        assert!(
            std::env::var_os("STRATA_REQUIRE_SCRIPT").is_none(),
            "`script` (util-linux) is not installed, and STRATA_REQUIRE_SCRIPT is set"
        );
        // Written to stderr itself, which `cargo test` shows; it captures `eprintln!`.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: interactive_shell_starts_and_leaves_on_ctrl_d: `script` (util-linux) \
              is not installed\n",
        );
        return;
    }
    let (t, db) = db_dir();
    let cmd = format!(
        "{} {} shell {db}",
        env!("CARGO_BIN_EXE_strata"),
        common::merge_policy_flags().join(" ")
    );
    // Typed lines, then Ctrl-D on an empty line.
    let out = run_with_input(
        Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env("HOME", t.path())
            .env("TERM", "dumb"),
        b"put k v\r\nget k\r\n\x04",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("strata shell"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(
        stdout(&strata(&["get", &db, "k"])),
        "v\n",
        "the shell's write was kept: {text}"
    );
}

#[test]
fn checkpoint_writes_a_copy_that_opens_and_refuses_an_existing_directory() {
    let (t, db) = db_dir();
    assert!(strata(&["put", &db, "apple", "red"]).status.success());
    assert!(strata(&["put", &db, "pear", "green"]).status.success());
    let copy = t.path().join("copy").to_str().unwrap().to_string();
    let o = strata(&["checkpoint", &db, &copy]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The copy has every key; writes to the database afterwards stay out of it.
    assert!(strata(&["put", &db, "plum", "purple"]).status.success());
    assert_eq!(
        stdout(&strata(&["scan", &copy])),
        "apple\tred\npear\tgreen\n"
    );
    let o = strata(&["checkpoint", &db, &copy]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("exists already"), "{}", stderr(&o));
}

#[test]
fn backup_create_list_verify_restore_and_purge() {
    let (t, db) = db_dir();
    let backups = t.path().join("backups").to_str().unwrap().to_string();
    assert!(strata(&["put", &db, "apple", "red"]).status.success());
    let o = strata(&["backup", "create", &db, &backups]);
    assert!(stdout(&o).starts_with("backup 1 of "), "{}", stderr(&o));
    assert!(strata(&["put", &db, "pear", "green"]).status.success());
    let o = strata(&["backup", "create", &db, &backups]);
    assert!(stdout(&o).starts_with("backup 2 of "), "{}", stderr(&o));

    let list = stdout(&strata(&["backup", "list", &backups]));
    let ids: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["1", "2"], "{list}");
    let o = strata(&["backup", "verify", &backups]);
    assert_eq!(stdout(&o), "backup 2: every file matches its checksum\n");

    let first = t.path().join("first").to_str().unwrap().to_string();
    let o = strata(&["backup", "restore", &backups, &first, "--id", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&strata(&["scan", &first])), "apple\tred\n");
    let newest = t.path().join("newest").to_str().unwrap().to_string();
    assert!(
        strata(&["backup", "restore", &backups, &newest])
            .status
            .success()
    );
    assert_eq!(
        stdout(&strata(&["scan", &newest])),
        "apple\tred\npear\tgreen\n"
    );

    let o = strata(&["backup", "purge", &backups, "--keep", "1"]);
    assert_eq!(stdout(&o), "deleted 1 backups [1]\n");
    let o = strata(&["backup", "restore", &backups, &first, "--id", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("exists already"), "{}", stderr(&o));
    let gone = t.path().join("gone").to_str().unwrap().to_string();
    let o = strata(&["backup", "restore", &backups, &gone, "--id", "1"]);
    assert!(stderr(&o).contains("no backup 1"), "{}", stderr(&o));
    let o = strata(&["backup", "list", &first]);
    assert!(
        stderr(&o).contains("no backup directory at"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn delete_range_removes_a_range_with_one_tombstone_from_the_command_and_the_shell() {
    let (_t, db) = db_dir();
    for k in ["a", "b", "c", "d", "e"] {
        assert!(strata(&["put", &db, k, "v"]).status.success());
    }
    let o = strata(&["delete-range", &db, "b", "d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&strata(&["scan", &db])), "a\tv\nd\tv\ne\tv\n");
    let o = strata(&["delete-range", &db, "z", "a"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("begin is after end"), "{}", stderr(&o));
    let o = strata_stdin(&["shell", &db], "delrange d zz\nscan a zz\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("ok"), "{text}");
    assert!(text.contains("(1 entries)"), "{text}");
    let dump = stdout(&strata(&["scan", &db]));
    assert_eq!(dump, "a\tv\n");
}

#[test]
fn tune_ranks_designs_for_the_workload() {
    let o = strata(&[
        "tune",
        "--workload",
        "writes=0.5,point=0.4,missing=0.05,scan=0.05",
        "--entries",
        "100M",
        "--memory",
        "120MiB",
        "--top",
        "4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("10.07 filter bits per key"), "{out}");
    let policies = ["leveling", "tiering", "lazy-leveling"];
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next().is_some_and(|w| w.parse::<u32>().is_ok())
                && words.next().is_some_and(|w| policies.contains(&w))
        })
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert!(rows[0].contains("leveling T=6 monkey"), "{out}");
    assert!(
        out.contains("best: leveling with size ratio 6 and Monkey's filter bits"),
        "{out}"
    );
    // Writes alone favour tiering, and the line after the table says how to run it.
    let o = strata(&[
        "tune",
        "--workload",
        "writes=1",
        "--entries",
        "1e8",
        "--memory",
        "120MiB",
    ]);
    assert!(stdout(&o).contains("best: tiering"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("run it: strata --merge-policy tiering --size-ratio"),
        "{}",
        stdout(&o)
    );
    // (workload, entries, memory, ratios): each is refused with a message.
    for (workload, entries, memory, ratios) in [
        ("reads=1", "1M", "1MiB", "10"),
        ("writes=1", "0", "1MiB", "10"),
        ("writes=1", "1M", "1ZB", "10"),
        ("writes=1", "1M", "1MiB", "1"),
    ] {
        let bad = [
            "tune",
            "--workload",
            workload,
            "--entries",
            entries,
            "--memory",
            memory,
            "--ratios",
            ratios,
        ];
        let o = strata(&bad);
        assert!(!o.status.success(), "{bad:?} should fail");
        assert!(!stderr(&o).is_empty());
    }
}

#[test]
fn the_filter_policy_reaches_the_tables_and_stats() {
    let t = tempfile::tempdir().unwrap();
    let db = t.path().join("db");
    let db = db.to_str().unwrap();
    let input: String = (0..3000).map(|i| format!("k{i:05}\tv{i}\n")).collect();
    let o = strata_stdin(
        &["--filter-policy", "monkey:7", "put", db, "--from-stdin"],
        &input,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // The policy is an option of each open, as RocksDB's options are: the reopen writes the
    // logged writes into a table with it.
    let o = strata(&["--filter-policy", "monkey:7", "stats", db]);
    let out = stdout(&o);
    // One run holds everything: Monkey gives it the whole budget.
    assert!(out.contains("filter bits/key"), "{out}");
    assert!(out.contains("7.00"), "{out}");
    assert!(
        out.contains("tables read in vain per lookup of a missing key"),
        "{out}"
    );
    // The shell opens with the policy too: its flush writes a table of 3 bits per key.
    let shell_db = t.path().join("shell-db");
    let shell_db = shell_db.to_str().unwrap();
    let o = strata_stdin(
        &["--filter-policy", "uniform:3", "shell", shell_db],
        "put a b\nflush\nstats\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("3.00"), "{}", stdout(&o));
    let o = strata(&["--filter-policy", "bloom:7", "stats", db]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("uniform:BITS or monkey:BITS"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn column_families_from_the_command_line_the_shell_and_inspect() {
    let (_t, db) = db_dir();
    assert!(strata(&["put", &db, "k", "in-default"]).status.success());
    // A family must exist before it is written.
    let o = strata(&["put", &db, "--family", "users", "k", "v"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no column family \"users\""),
        "{}",
        stderr(&o)
    );
    let o = strata(&["family", "create", &db, "users"]);
    assert_eq!(
        stdout(&o),
        "created column family users\n",
        "{}",
        stderr(&o)
    );
    assert!(
        strata(&["put", &db, "--family", "users", "k", "in-users"])
            .status
            .success()
    );
    assert!(
        strata(&["put", &db, "--family", "users", "k2", "v2"])
            .status
            .success()
    );
    assert_eq!(stdout(&strata(&["get", &db, "k"])), "in-default\n");
    assert_eq!(
        stdout(&strata(&["get", &db, "--family", "users", "k"])),
        "in-users\n"
    );
    assert_eq!(
        stdout(&strata(&["scan", &db, "--family", "users"])),
        "k\tin-users\nk2\tv2\n"
    );
    assert!(
        strata(&["del", &db, "--family", "users", "k2"])
            .status
            .success()
    );
    assert_eq!(stdout(&strata(&["scan", &db])), "k\tin-default\n");
    let list = stdout(&strata(&["family", "list", &db]));
    let names: Vec<&str> = list
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(names, ["default", "users"], "{list}");
    // The shell switches families with `use`; its `families` lists them.
    let o = strata_stdin(
        &["shell", &db],
        "families\nuse users\nget k\nput s1 from-shell\nflush\nuse default\nget s1\n\
         family create events\nuse events\nput e 1\nget e\n",
    );
    let out = stdout(&o);
    assert!(
        out.contains("using column family users\nin-users\nok\nok\n"),
        "{out}"
    );
    assert!(
        out.contains("using column family default\n(not found)\n"),
        "{out}"
    );
    assert!(out.contains("created column family events\n"), "{out}");
    assert!(out.contains("using column family events\nok\n1\n"), "{out}");
    // inspect shows each family's tables; stats lists the families.
    let o = strata(&["inspect", &db]);
    let out = stdout(&o);
    assert!(out.contains("column family default (id 0):"), "{out}");
    assert!(out.contains("column family users (id 1):"), "{out}");
    assert!(out.contains("column family events (id 2):"), "{out}");
    let o = strata(&["stats", &db]);
    assert!(stdout(&o).contains("column family"), "{}", stdout(&o));
    let o = strata(&["family", "drop", &db, "users"]);
    assert_eq!(
        stdout(&o),
        "dropped column family users\n",
        "{}",
        stderr(&o)
    );
    let o = strata(&["get", &db, "--family", "users", "k"]);
    assert!(!o.status.success());
    let list = stdout(&strata(&["family", "list", &db]));
    let names: Vec<&str> = list
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(names, ["default", "events"], "{list}");
    let o = strata(&["family", "drop", &db, "default"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be dropped"), "{}", stderr(&o));
}

#[test]
fn the_merge_policy_is_chosen_on_the_command_line_and_shown_by_stats() {
    let (_t, db) = db_dir();
    let input: String = (0..500).map(|i| format!("k{i:04}\tv{i}\n")).collect();
    let o = strata_as_given_stdin(
        &[
            "--merge-policy",
            "tiering",
            "--size-ratio",
            "3",
            "put",
            &db,
            "--from-stdin",
        ],
        &input,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = strata_as_given(&[
        "--merge-policy",
        "tiering",
        "--size-ratio",
        "3",
        "stats",
        &db,
    ]);
    assert!(
        stdout(&o).contains("merge policy      tiering with size ratio 3, sorted runs per level"),
        "{}",
        stdout(&o)
    );
    let o = strata_as_given_stdin(
        &["--merge-policy", "lazy-leveling", "shell", &db],
        "stats\nget k0042\n",
    );
    assert!(
        stdout(&o).contains("merge policy      lazy-leveling with size ratio 10"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("v42"), "{}", stdout(&o));
    let o = strata_as_given(&["--merge-policy", "bushy", "stats", &db]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("leveling, tiering or lazy-leveling"),
        "{}",
        stderr(&o)
    );
    let o = strata_as_given(&["--size-ratio", "1", "stats", &db]);
    assert_eq!(o.status.code(), Some(2));
}

/// `strata repair` on a directory whose MANIFEST is gone: every key reads again, and the
/// report says what was kept.
#[test]
fn repair_rebuilds_a_database_whose_manifest_is_gone() {
    let (_t, db) = db_dir();
    let input: String = (0..3000).map(|i| format!("k{i:05}\tv{i}\n")).collect();
    assert!(
        strata_stdin(&["put", &db, "--from-stdin"], &input)
            .status
            .success()
    );
    // A reopen flushes the replayed WAL into a table; then more writes only in a WAL.
    assert!(strata(&["get", &db, "k00001"]).status.success());
    assert!(
        strata(&["put", &db, "k00001", "rewritten"])
            .status
            .success()
    );
    for entry in std::fs::read_dir(&db).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("MANIFEST-")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    assert!(!strata(&["get", &db, "k00002"]).status.success());
    let o = strata(&["repair", &db]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("old MANIFEST: unreadable or missing"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("tables kept: 1 (3000 entries)"),
        "{}",
        stdout(&o)
    );
    let o = strata(&["scan", &db]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut want: String = (0..3000).map(|i| format!("k{i:05}\tv{i}\n")).collect();
    want = want.replace("k00001\tv1\n", "k00001\trewritten\n");
    assert_eq!(stdout(&o), want);
    let o = strata(&["repair", "/nonexistent/strata"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));
}
