//! `Db::updates_since` and the WAL listener against the batches written: random streams of
//! batches across memtable switches, flushes and reopens, the WALs kept by age and size, and
//! the listener's records in commit order from several writers.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use strata::{
    Db, EntryKind, Error, FileSystem, MemFs, Options, WalListener, WriteBatch, WriteOptions,
};

/// One operation, owned: what a batch did, to compare with what the WAL gives back.
type Entry = (EntryKind, Vec<u8>, Vec<u8>);

fn options(fs: &MemFs, ttl: Option<Duration>, limit: u64) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 4 << 10,
        wal_ttl: ttl,
        wal_size_limit: limit,
        merge_operator: Some(Arc::new(strata::merge::CounterAdd)),
        ..Options::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, Vec<u8>),
    Delete(u8),
    Merge(u8),
    DeleteRange(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(k, v)| Op::Put(k, v)),
        2 => any::<u8>().prop_map(Op::Delete),
        1 => any::<u8>().prop_map(Op::Merge),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::DeleteRange(a.min(b), a.max(b))),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    Write(Vec<Op>),
    Flush,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => proptest::collection::vec(op(), 1..6).prop_map(Step::Write),
        1 => Just(Step::Flush),
        1 => Just(Step::Reopen),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

/// The batch of `ops`, and the entries it should read back as.
fn batch_of(ops: &[Op]) -> (WriteBatch, Vec<Entry>) {
    let mut batch = WriteBatch::new();
    let mut entries = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                batch.put(&key(*k), v);
                entries.push((EntryKind::Put, key(*k), v.clone()));
            }
            Op::Delete(k) => {
                batch.delete(&key(*k));
                entries.push((EntryKind::Delete, key(*k), Vec::new()));
            }
            Op::Merge(k) => {
                let operand = 1u64.to_le_bytes().to_vec();
                batch.merge(&key(*k), &operand);
                entries.push((EntryKind::Merge, key(*k), operand));
            }
            Op::DeleteRange(a, b) => {
                batch.delete_range(&key(*a), &key(*b));
                entries.push((EntryKind::DeleteRange, key(*a), key(*b)));
            }
        }
    }
    (batch, entries)
}

/// Every entry the iterator from `seq` gives, each with its sequence number.
fn read_since(db: &Db, seq: u64) -> Result<Vec<(u64, Entry)>, Error> {
    let mut out = Vec::new();
    for item in db.updates_since(seq)? {
        let (first, batch) = item?;
        for (i, e) in batch.entries().enumerate() {
            let e = e?;
            out.push((first + i as u64, (e.kind, e.key.to_vec(), e.value.to_vec())));
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// With the WALs kept, every write since any sequence number comes back, in order, with
    /// its sequence number, across memtable switches, flushes and reopens.
    #[test]
    fn updates_since_gives_back_every_batch_written(
        steps in proptest::collection::vec(step(), 1..60),
        from in 0.0f64..1.0,
    ) {
        let fs = MemFs::new();
        let dir = Path::new("/updates");
        let opts = options(&fs, Some(Duration::from_secs(3600)), 0);
        let mut db = Db::open(dir, opts.clone()).unwrap();
        let mut written: Vec<(u64, Entry)> = Vec::new();
        for s in &steps {
            match s {
                Step::Write(ops) => {
                    let (batch, entries) = batch_of(ops);
                    db.write(batch, WriteOptions::default()).unwrap();
                    let first = db.latest_sequence() + 1 - entries.len() as u64;
                    written.extend((first..).zip(entries));
                }
                Step::Flush => db.flush().unwrap(),
                Step::Reopen => {
                    drop(db);
                    db = Db::open(dir, opts.clone()).unwrap();
                }
            }
        }
        prop_assert_eq!(db.latest_sequence(), written.len() as u64);
        prop_assert_eq!(&read_since(&db, 1).unwrap(), &written);
        // From the middle: the batch that holds the number, and every one after it.
        let at = 1 + (from * written.len() as f64) as u64;
        let got = read_since(&db, at).unwrap();
        let skipped = written.len() - got.len();
        prop_assert!(got.first().is_none_or(|(s, _)| *s <= at));
        prop_assert_eq!(&got[..], &written[skipped..]);
        // Past the newest write: nothing yet, and the iterator says where to ask next.
        let mut tail = db.updates_since(db.latest_sequence() + 1).unwrap();
        prop_assert!(tail.next().is_none());
        prop_assert_eq!(tail.next_sequence(), db.latest_sequence() + 1);
    }
}

fn put_many(db: &Db, from: u32, n: u32) {
    for i in from..from + n {
        db.put(format!("k{i:06}").as_bytes(), &[b'v'; 200]).unwrap();
    }
}

#[test]
fn without_retention_a_flushed_wal_is_gone_and_the_error_says_so() {
    let fs = MemFs::new();
    let db = Db::open("/gone", options(&fs, None, 0)).unwrap();
    put_many(&db, 0, 100);
    db.flush().unwrap();
    put_many(&db, 100, 3);
    let err = read_since(&db, 1).unwrap_err();
    assert!(
        matches!(err, Error::UpdatesGone { asked: 1, oldest } if oldest > 1),
        "{err}"
    );
    // What the live WAL holds is still there.
    let got = read_since(&db, 101).unwrap();
    assert_eq!(
        got.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![101, 102, 103]
    );
    assert_eq!(got[0].1.1, b"k000100".to_vec());
    assert!(
        db.updates_since(105).is_err(),
        "past the newest write plus one"
    );
}

#[test]
fn the_size_limit_deletes_the_oldest_kept_wals_first() {
    let fs = MemFs::new();
    let dir = Path::new("/limit");
    let db = Db::open(dir, options(&fs, None, 50 << 10)).unwrap();
    for round in 0..8 {
        put_many(&db, round * 100, 100);
        db.flush().unwrap();
    }
    // 800 puts of about 220 bytes logged: the WALs kept hold at most the limit, besides
    // the active one (the newest, its space reserved ahead), and no less than the limit
    // less one WAL (a memtable of 4 KiB).
    let mut wals: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    wals.sort();
    wals.pop();
    let kept: u64 = wals
        .iter()
        .map(|n| fs.file_size(&dir.join(n)).unwrap())
        .sum();
    assert!(
        (44 << 10..=50 << 10).contains(&kept),
        "{kept} bytes of WAL kept"
    );
    let err = read_since(&db, 1).unwrap_err();
    let Error::UpdatesGone { oldest, .. } = err else {
        panic!("{err}");
    };
    assert!(oldest > 100, "the first WALs went: oldest kept {oldest}");
    let got = read_since(&db, oldest).unwrap();
    assert_eq!(got.len() as u64, db.latest_sequence() - oldest + 1);
    assert_eq!(got.first().map(|(s, _)| *s), Some(oldest));
}

#[test]
fn an_age_limit_keeps_wals_until_they_are_older_than_it() {
    let fs = MemFs::new();
    let dir = Path::new("/ttl");
    let db = Db::open(dir, options(&fs, Some(Duration::from_millis(300)), 0)).unwrap();
    put_many(&db, 0, 50);
    db.flush().unwrap();
    assert_eq!(read_since(&db, 1).unwrap().len(), 50, "kept while young");
    std::thread::sleep(Duration::from_millis(400));
    // The next WAL set aside checks the age of the kept ones.
    put_many(&db, 50, 50);
    db.flush().unwrap();
    assert!(matches!(
        read_since(&db, 1),
        Err(Error::UpdatesGone { asked: 1, .. })
    ));
    assert_eq!(read_since(&db, 51).unwrap().len(), 50);
}

#[test]
fn kept_wals_survive_a_reopen_and_are_not_replayed_twice() {
    let fs = MemFs::new();
    let dir = Path::new("/reopen");
    let opts = options(&fs, None, 1 << 20);
    let db = Db::open(dir, opts.clone()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    db.merge(b"n", &1u64.to_le_bytes()).unwrap();
    db.flush().unwrap();
    drop(db);
    let db = Db::open(dir, opts).unwrap();
    // A kept WAL replayed at open would add its merge operand a second time.
    assert_eq!(db.get(b"n").unwrap(), Some(1u64.to_le_bytes().to_vec()));
    let got = read_since(&db, 1).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, (EntryKind::Put, b"a".to_vec(), b"1".to_vec()));
}

/// Records what the listener is told.
#[derive(Default)]
struct Recorder(Mutex<Vec<(u64, Vec<u8>)>>);

impl WalListener for Recorder {
    fn logged(&self, first_seq: u64, batch: &WriteBatch) {
        self.0
            .lock()
            .unwrap()
            .push((first_seq, batch.to_record(first_seq)));
    }
}

#[test]
fn the_listener_hears_every_group_in_commit_order_and_its_records_apply_as_written() {
    let recorder = Arc::new(Recorder::default());
    let fs = MemFs::new();
    let opts = Options {
        wal_listener: Some(recorder.clone()),
        ..options(&fs, None, 0)
    };
    let db = Arc::new(Db::open("/primary", opts).unwrap());
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..300u32 {
                    let mut b = WriteBatch::new();
                    b.put(format!("t{t}-{i:04}").as_bytes(), &i.to_le_bytes());
                    if i % 7 == 0 {
                        b.delete(format!("t{t}-{:04}", i / 2).as_bytes());
                    }
                    db.write(b, WriteOptions::default()).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A replica applies each record in the order heard and ends with the same contents.
    let replica = Db::open("/replica", options(&fs, None, 0)).unwrap();
    let mut next = 1;
    for (first, record) in recorder.0.lock().unwrap().iter() {
        let (seq, batch) = WriteBatch::from_record(record).unwrap();
        assert_eq!(seq, *first);
        assert_eq!(seq, next, "groups heard out of order or with a gap");
        next += batch.len() as u64;
        replica.write(batch, WriteOptions::default()).unwrap();
    }
    assert_eq!(next, db.latest_sequence() + 1);
    let all =
        |d: &Db| -> Vec<(Vec<u8>, Vec<u8>)> { d.scan(..).unwrap().map(|kv| kv.unwrap()).collect() };
    assert_eq!(all(&replica), all(&db));
    assert_eq!(replica.latest_sequence(), db.latest_sequence());
}
