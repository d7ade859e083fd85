//! Many block reads at once, for batched lookups ([`crate::Db::get_many`]).
//!
//! A lookup of a key the page cache does not hold waits for one read from the device, and a
//! thread that reads one block at a time gets the device's speed at a queue depth of one: on
//! a cloud disk, a tenth or less of what it serves with dozens of reads in flight. A batch's
//! lookups need their data blocks all at once, so they are submitted together through
//! io_uring, and the batch waits for the slowest instead of the sum.
//!
//! Each thread keeps one ring, made on its first batch. Where the kernel refuses io_uring
//! (too old, or forbidden by a seccomp policy), [`read_each`] answers false and the caller
//! reads one block at a time, as it does for files without a descriptor.

use std::io;
use std::os::fd::RawFd;

/// One read: `len` bytes of file `fd` at `offset`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadRequest {
    pub fd: RawFd,
    pub offset: u64,
    pub len: usize,
}

/// Reads every request, in parallel, and hands each answer to `each` as it lands: its
/// request's index and its bytes (all `len` of them) or the error. So the caller checks and
/// parses the blocks that came first while the device serves the rest. False when the reads
/// could not be made together: this thread has no ring (`each` is called for none), or its
/// ring refused every read or failed (the answers `each` had are errors); the caller reads
/// what it lacks one at a time.
///
/// A panic in `each` waits for the reads still in flight before it goes on unwinding: the
/// kernel writes into the batch's buffers until then.
#[cfg(target_os = "linux")]
pub(crate) fn read_each(
    requests: &[ReadRequest],
    mut each: impl FnMut(usize, io::Result<Vec<u8>>),
) -> bool {
    use std::cell::RefCell;
    thread_local! {
        // `None` inside: this thread's kernel refused a ring, or a ring failed mid-batch.
        static RING: RefCell<Option<Option<io_uring::IoUring>>> = const { RefCell::new(None) };
    }
    RING.with(|cell| {
        let mut cell = cell.borrow_mut();
        let slot = cell.get_or_insert_with(|| io_uring::IoUring::new(64).ok());
        let Some(ring) = slot.as_mut() else {
            return false;
        };
        let mut refused = 0;
        let result = uring::read_each(ring, requests, |i, answer| {
            if answer.as_ref().err().and_then(io::Error::raw_os_error) == Some(libc::EINVAL) {
                refused += 1;
            }
            each(i, answer);
        });
        match result {
            // A kernel whose rings lack the read operation (before 5.6) refuses every read as
            // invalid: the caller reads them again one at a time, as this thread will from
            // now on.
            Ok(()) if refused == requests.len() => {
                *slot = None;
                false
            }
            Ok(()) => true,
            Err(uring::Broken(panicked)) => {
                // The ring's reads may still land in buffers it leaked on purpose: never use
                // it again on this thread.
                if let Some(ring) = slot.take() {
                    std::mem::forget(ring);
                }
                if let Some(p) = panicked {
                    std::panic::resume_unwind(p);
                }
                false
            }
        }
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn read_each(
    _requests: &[ReadRequest],
    _each: impl FnMut(usize, io::Result<Vec<u8>>),
) -> bool {
    false
}

#[cfg(target_os = "linux")]
mod uring {
    use std::io;

    use io_uring::{IoUring, opcode, types};

    use super::ReadRequest;

    /// The ring failed with reads in flight: their buffers were leaked, and so must the ring
    /// be, since the kernel may still write into them. Reads not answered were handed over as
    /// errors. Holds the panic of the caller's `each`, if one came first, to go on with once
    /// the ring is put away.
    pub(super) struct Broken(pub Option<Box<dyn std::any::Any + Send>>);

    /// Reads submitted with one system call: the device starts on the first ones while the
    /// kernel still prepares the rest, instead of after every read of the batch is prepared.
    const SUBMIT_STEP: usize = 8;
    /// Reads in flight at most, within what the ring's completion queue holds.
    const MAX_IN_FLIGHT: usize = 64;

    pub(super) fn read_each(
        ring: &mut IoUring,
        requests: &[ReadRequest],
        mut each: impl FnMut(usize, io::Result<Vec<u8>>),
    ) -> Result<(), Broken> {
        let n = requests.len();
        // A panic of `each` is held until no read is in flight (the kernel writes into the
        // buffers until then), and `each` gets no more answers after it.
        let panicked: std::cell::Cell<Option<Box<dyn std::any::Any + Send>>> = Default::default();
        let failed = std::cell::Cell::new(false);
        let mut each = |i: usize, answer: io::Result<Vec<u8>>| {
            if !failed.get() {
                let call = std::panic::AssertUnwindSafe(|| each(i, answer));
                if let Err(p) = std::panic::catch_unwind(call) {
                    panicked.set(Some(p));
                    failed.set(true);
                }
            }
        };
        // Read straight into each vector's spare capacity: zero-filling a block buffer first
        // costs a pass over it for nothing. `Some` until its answer is handed over.
        let mut buffers: Vec<Option<Vec<u8>>> = requests
            .iter()
            .map(|r| Some(Vec::with_capacity(r.len)))
            .collect();
        let (mut submitted, mut answered) = (0usize, 0usize);
        // Reads to make: all of them, or those already submitted once `each` panicked.
        let mut to_make = n;
        while answered < to_make {
            if failed.get() {
                to_make = submitted;
                if answered == to_make {
                    break;
                }
            }
            let step_end = submitted.saturating_add(SUBMIT_STEP).min(to_make);
            while submitted < step_end {
                let i = submitted;
                let (r, Some(buf)) = (&requests[i], &mut buffers[i]) else {
                    break;
                };
                let Ok(len) = u32::try_from(r.len) else {
                    buffers[i] = None;
                    each(i, Err(io::Error::other("block larger than 4 GiB")));
                    submitted += 1;
                    answered += 1;
                    continue;
                };
                let entry = opcode::Read::new(types::Fd(r.fd), buf.as_mut_ptr(), len)
                    .offset(r.offset)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the buffer's capacity is `len` bytes, and it is neither freed nor
                // moved until its completion is reaped below (or it is leaked when the ring
                // fails).
                if unsafe { ring.submission().push(&entry) }.is_err() {
                    break;
                }
                submitted += 1;
            }
            if answered == to_make {
                break;
            }
            // While reads remain to submit, no wait; then one wait for half of those in
            // flight at a time: each wakeup costs a switch back to this thread, and the
            // blocks of one half are checked while the other half is still read.
            let in_flight = submitted - answered;
            let wait = match submitted < to_make && in_flight < MAX_IN_FLIGHT {
                true => 0,
                false => in_flight.div_ceil(2),
            };
            loop {
                match ring.submit_and_wait(wait) {
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        // The unanswered buffers may still be written to: leaked, and their
                        // reads answered as failed.
                        for (i, b) in buffers.iter_mut().enumerate() {
                            if let Some(b) = b.take() {
                                std::mem::forget(b);
                                each(i, Err(io::Error::other("the read's ring failed")));
                            }
                        }
                        return Err(Broken(panicked.take()));
                    }
                }
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                let (Some(request), Some(slot)) = (requests.get(i), buffers.get_mut(i)) else {
                    continue;
                };
                let Some(mut buf) = slot.take() else {
                    continue;
                };
                answered += 1;
                let res = cqe.result();
                let answer = match usize::try_from(res) {
                    Ok(read) if read <= request.len => {
                        // SAFETY: the kernel wrote `read` bytes at the start of the buffer,
                        // within its capacity.
                        unsafe { buf.set_len(read) };
                        finish_short(request, &mut buf).map(|()| buf)
                    }
                    Ok(_) => Err(io::Error::other("read longer than asked")),
                    Err(_) => Err(io::Error::from_raw_os_error(-res)),
                };
                each(i, answer);
            }
        }
        if let Some(p) = panicked.take() {
            std::panic::resume_unwind(p);
        }
        Ok(())
    }

    /// Reads the rest of a read that came back short (the buffer holds what it read, and has
    /// the capacity of the whole), with `pread`; a file that ends first is an
    /// `UnexpectedEof`.
    fn finish_short(r: &ReadRequest, buf: &mut Vec<u8>) -> io::Result<()> {
        while buf.len() < r.len {
            let done = buf.len();
            let Some(Ok(at)) = r.offset.checked_add(done as u64).map(libc::off_t::try_from) else {
                return Err(io::Error::other("offset out of range"));
            };
            // SAFETY: the destination is the vector's spare capacity from `done` to `r.len`
            // (its capacity is `r.len`); pread writes at most `r.len - done` bytes there.
            let n =
                unsafe { libc::pread(r.fd, buf.as_mut_ptr().add(done).cast(), r.len - done, at) };
            match n {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n if n < 0 => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                // SAFETY: pread wrote `n` more bytes, within the capacity.
                n => unsafe { buf.set_len(done + n as usize) },
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// Every answer of [`read_each`], by request; each request must be answered once.
    fn read_all(requests: &[ReadRequest]) -> Option<Vec<io::Result<Vec<u8>>>> {
        let mut answers: Vec<Option<io::Result<Vec<u8>>>> = requests.iter().map(|_| None).collect();
        let used = read_each(requests, |i, a| {
            assert!(answers[i].is_none(), "request {i} answered twice");
            answers[i] = Some(a);
        });
        used.then(|| answers.into_iter().map(|a| a.expect("answered")).collect())
    }

    #[test]
    fn reads_come_back_whole_and_past_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let fd = file.as_raw_fd();
        // More requests than the ring has entries, of many sizes, some overlapping.
        let requests: Vec<ReadRequest> = (0..150)
            .map(|i| ReadRequest {
                fd,
                offset: (i * 1237) as u64,
                len: 1 + (i * 97) % 5000,
            })
            .chain([ReadRequest {
                fd,
                offset: 199_990,
                len: 100,
            }])
            .collect();
        let Some(answers) = read_all(&requests) else {
            // The kernel refused io_uring: batched lookups read one block at a time here.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"SKIPPED: reads_come_back_whole: this kernel refuses io_uring\n",
            );
            assert!(std::env::var_os("STRATA_REQUIRE_IO_URING").is_none());
            return;
        };
        assert_eq!(answers.len(), requests.len());
        for (r, a) in requests.iter().zip(&answers).take(150) {
            let start = r.offset as usize;
            assert_eq!(a.as_ref().unwrap().as_slice(), &data[start..start + r.len]);
        }
        let past = answers.last().unwrap().as_ref().unwrap_err();
        assert_eq!(past.kind(), io::ErrorKind::UnexpectedEof);
        // A panic of the caller's code while reads are in flight comes out once none is,
        // and the thread's ring serves the next batch whole.
        let mut calls = 0;
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_each(&requests, |_, _| {
                calls += 1;
                panic!("the caller's check failed");
            })
        }));
        assert!(panic.is_err());
        assert_eq!(calls, 1, "no answer after the panic");
        let again = read_all(&requests).unwrap();
        for (r, a) in requests.iter().zip(&again).take(150) {
            let start = r.offset as usize;
            assert_eq!(a.as_ref().unwrap().as_slice(), &data[start..start + r.len]);
        }
        // A closed descriptor is an error for its read alone.
        let bad = read_all(&[ReadRequest {
            fd: -1,
            offset: 0,
            len: 10,
        }])
        .unwrap();
        assert!(bad[0].is_err());
    }
}
