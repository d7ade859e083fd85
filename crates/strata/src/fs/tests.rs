use super::mem::{MEM_LOG_RESERVE, MEM_PAGE};
use super::*;

#[test]
fn memfs_power_loss_keeps_only_synced_bytes_and_synced_entries() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let mut a = fs.create(&dir.join("a")).unwrap();
    a.append(b"hello").unwrap();
    a.sync().unwrap();
    a.append(b" world").unwrap();
    a.flush().unwrap();
    a.append(b" unflushed").unwrap();
    fs.sync_dir(dir).unwrap();
    let mut b = fs.create(&dir.join("b")).unwrap();
    b.append(b"lost").unwrap();
    b.sync().unwrap();
    let after = fs.power_loss_copy();
    assert_eq!(after.read_all(&dir.join("a")).unwrap(), b"hello");
    assert!(
        !after.exists(&dir.join("b")),
        "entry was never made durable"
    );
    let crashed = fs.process_crash_copy();
    assert_eq!(crashed.read_all(&dir.join("a")).unwrap(), b"hello world");
    assert_eq!(crashed.read_all(&dir.join("b")).unwrap(), b"lost");
    drop(a);
    assert_eq!(
        fs.process_crash_copy().read_all(&dir.join("a")).unwrap(),
        b"hello world unflushed",
        "a writer hands over what it holds when it closes"
    );
}

#[test]
fn memfs_logs_keep_a_reserve_of_zeros_and_lose_unsynced_pages_one_by_one() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let path = dir.join("log");
    let mut log = fs.create_log(&path).unwrap();
    let synced: Vec<u8> = (0..5000u32).map(|i| (i % 251 + 1) as u8).collect();
    log.append(&synced).unwrap();
    log.sync().unwrap();
    fs.sync_dir(dir).unwrap();
    let unsynced: Vec<u8> = (0..3 * MEM_PAGE as u32)
        .map(|i| (i % 13 + 1) as u8)
        .collect();
    log.append(&unsynced).unwrap();
    log.flush().unwrap();
    let all = [&synced[..], &unsynced[..]].concat();
    // A crash of the process: every byte handed over, then the reserve's zeros.
    let crashed = fs.process_crash_copy().read_all(&path).unwrap();
    assert_eq!(crashed.len(), MEM_LOG_RESERVE);
    assert_eq!(&crashed[..all.len()], &all[..]);
    assert!(crashed[all.len()..].iter().all(|&b| b == 0));
    // A clean power loss keeps the synced bytes only.
    let lost = fs.power_loss_copy().read_all(&path).unwrap();
    assert_eq!(&lost[..synced.len()], &synced[..]);
    assert!(lost[synced.len()..].iter().all(|&b| b == 0));
    // A torn one keeps whole pages: each page of the copy is all new or all old.
    let mut kept_later_than_lost = false;
    for seed in 0..64 {
        let torn = fs.torn_power_loss_copy(seed).read_all(&path).unwrap();
        assert_eq!(&torn[..synced.len()], &synced[..], "seed {seed}");
        let mut lost_one = false;
        for page in (synced.len() / MEM_PAGE)..all.len().div_ceil(MEM_PAGE) {
            let start = (page * MEM_PAGE).max(synced.len());
            let end = ((page + 1) * MEM_PAGE).min(all.len());
            let got = &torn[start..end];
            if got == &all[start..end] {
                kept_later_than_lost |= lost_one;
            } else {
                assert!(
                    got.iter().all(|&b| b == 0),
                    "seed {seed}: page {page} torn inside"
                );
                lost_one = true;
            }
        }
    }
    assert!(kept_later_than_lost, "no copy kept a page after a lost one");
    drop(log);
    assert_eq!(
        fs.read_all(&path).unwrap(),
        all,
        "closing cuts the reserve off"
    );
}

#[test]
fn memfs_maps_files_for_reading() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    let mut f = fs.create(Path::new("/db/t")).unwrap();
    f.append(b"table bytes").unwrap();
    drop(f);
    let map = fs.open(Path::new("/db/t")).unwrap().map().unwrap();
    assert_eq!(map.bytes(), b"table bytes");
}

#[test]
fn memfs_rename_is_durable_only_after_dir_sync() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let mut a = fs.create(&dir.join("tmp")).unwrap();
    a.append(b"x").unwrap();
    a.sync().unwrap();
    fs.sync_dir(dir).unwrap();
    fs.rename(&dir.join("tmp"), &dir.join("final")).unwrap();
    let after = fs.power_loss_copy();
    assert!(after.exists(&dir.join("tmp")));
    assert!(!after.exists(&dir.join("final")));
}

#[cfg(target_os = "linux")]
#[test]
fn a_mapped_log_keeps_every_byte_across_chunks_and_ends_at_its_length_synced_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut expect = Vec::new();
    {
        let mut log = StdFs.create_log(&path).unwrap();
        // Pieces of awkward sizes, so that some straddle the chunk boundaries, and some
        // large enough that the record after them goes out with pwrite.
        for i in 0..2_000usize {
            let piece: Vec<u8> = (0..(i * 37) % 9001 + 1).map(|j| (i + j) as u8).collect();
            // A record comes in pieces, as the log writer appends a header and payload.
            let (head, tail) = piece.split_at(piece.len() / 3);
            log.append(head).unwrap();
            log.append(tail).unwrap();
            expect.extend_from_slice(&piece);
            // Synced and flushed records mixed: a record after a synced one, or after a
            // large one, is gathered and written with pwrite; one after a small flushed
            // one is stored into the mapping.
            if i % 3 == 0 {
                log.sync().unwrap();
            } else {
                log.flush().unwrap();
            }
        }
        assert!(expect.len() > 2 * super::mapped::CHUNK);
        // While the log is open, the bytes are readable by others, zeros after them.
        let seen = StdFs.read_all(&path).unwrap();
        assert_eq!(&seen[..expect.len()], &expect[..]);
        assert!(seen[expect.len()..].iter().all(|&b| b == 0));
        // Appended after a sync and never flushed: closing the log writes it.
        log.sync().unwrap();
        log.append(b"last words").unwrap();
        expect.extend_from_slice(b"last words");
    }
    assert_eq!(StdFs.read_all(&path).unwrap(), expect);
}

#[test]
fn locks_are_exclusive_until_dropped() {
    for fs in [
        Box::new(MemFs::new()) as Box<dyn FileSystem>,
        Box::new(StdFs) as Box<dyn FileSystem>,
    ] {
        let dir = tempfile::tempdir().unwrap();
        fs.create_dir_all(dir.path()).unwrap();
        let p = dir.path().join("LOCK");
        let l = fs.lock(&p).unwrap();
        assert_eq!(
            fs.lock(&p).err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
        drop(l);
        fs.lock(&p).unwrap();
    }
}
