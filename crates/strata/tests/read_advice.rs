//! What the engine tells the kernel about its reads of table files: every table file it
//! opens is advised as read at random places (so a lookup's read brings in its own pages
//! and no readahead beside them), and a compaction, which reads its inputs in order with
//! `pread`, asks for each window of the file before it reads there. Calls are watched
//! through the file system seam.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::watched_fs::{Hooks, WatchedFs};
use strata::{Db, Options, RandomAccessFile};

/// What happened to one open of a table file, in order.
#[derive(Default)]
struct Calls {
    advised_random: bool,
    /// Ranges asked for ahead, as `(start, end)`.
    hinted: Vec<(u64, u64)>,
    /// Reads as `(offset, len, advised random before it, asked for ahead before it)`.
    reads: Vec<(u64, usize, bool, bool)>,
}

#[derive(Default)]
struct Recording {
    opens: Mutex<Vec<(PathBuf, Arc<Mutex<Calls>>)>>,
}

struct RecordedFile {
    file: Arc<dyn RandomAccessFile>,
    calls: Arc<Mutex<Calls>>,
}

impl RandomAccessFile for RecordedFile {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        {
            let mut c = self.calls.lock().unwrap();
            let end = offset + len as u64;
            let hinted = covered(&c.hinted, offset, end);
            let advised = c.advised_random;
            c.reads.push((offset, len, advised, hinted));
        }
        self.file.read_at(offset, len)
    }
    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }
    fn advise_random(&self) {
        self.calls.lock().unwrap().advised_random = true;
        self.file.advise_random();
    }
    fn will_need(&self, offset: u64, len: u64) {
        self.calls
            .lock()
            .unwrap()
            .hinted
            .push((offset, offset + len));
        self.file.will_need(offset, len);
    }
}

/// Whether the ranges asked for cover `[start, end)` between them.
fn covered(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut reached = start;
    for (s, e) in sorted {
        if s <= reached {
            reached = reached.max(e);
        }
    }
    reached >= end
}

impl Hooks for Recording {
    fn opened(&self, path: &Path, file: Arc<dyn RandomAccessFile>) -> Arc<dyn RandomAccessFile> {
        if path.extension().is_none_or(|e| e != "sst") {
            return file;
        }
        let calls = Arc::new(Mutex::new(Calls::default()));
        self.opens
            .lock()
            .unwrap()
            .push((path.to_path_buf(), calls.clone()));
        Arc::new(RecordedFile { file, calls })
    }
}

#[test]
fn table_files_are_read_at_random_and_compactions_ask_for_what_they_read_next() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(WatchedFs::new(Recording::default()));
    let opts = Options {
        fs: fs.clone(),
        write_buffer_size: 1 << 20,
        target_file_size: 2 << 20,
        // Every read goes through `read_at`, where the seam sees it.
        table_map_bytes: 0,
        idle_merge_after: None,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let value = vec![b'v'; 100];
    for i in 0..60_000u32 {
        let key = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000);
        db.put(key.as_bytes(), &value).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let opens = fs.hooks.opens.lock().unwrap();
    let (mut data_reads, mut compacted) = (0, 0);
    for (path, calls) in opens.iter() {
        let calls = calls.lock().unwrap();
        // The end of the run of reads in order so far: a read from the start of the file
        // begins one, and a read where the last one ended goes on with it (or at the next
        // page, past the zeroes before a block kept within a page). The footer, index and
        // filter are read elsewhere, when the table opens.
        let mut run_end: Option<u64> = None;
        for &(offset, len, advised, hinted) in &calls.reads {
            assert!(
                advised,
                "{} read at {offset} before it was advised random",
                path.display()
            );
            if offset == 0
                || run_end.is_some_and(|e| (e..=e.next_multiple_of(4096)).contains(&offset))
            {
                data_reads += 1;
                assert!(
                    hinted,
                    "{} read {len} bytes at {offset} in order without asking for them ahead",
                    path.display()
                );
                run_end = Some(offset + len as u64);
            }
        }
        compacted += usize::from(calls.reads.iter().any(|r| r.0 == 0));
    }
    // The flushed tables were read whole by the compaction: a check of no reads would pass
    // whatever the engine did.
    assert!(
        compacted >= 2,
        "{compacted} tables were read from their start"
    );
    assert!(
        data_reads >= 1000,
        "only {data_reads} data blocks were read"
    );
}
