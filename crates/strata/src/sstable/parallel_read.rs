//! Many block reads at once, for batched lookups ([`crate::Db::get_many`]).
//!
//! A lookup of a key the page cache does not hold waits for one read from the device, and a
//! thread that reads one block at a time gets the device's speed at a queue depth of one: on
//! a cloud disk, a tenth or less of what it serves with dozens of reads in flight. A batch's
//! lookups need their data blocks all at once, so they are submitted together through
//! io_uring, and the batch waits for the slowest instead of the sum.
//!
//! Each thread keeps one ring, made on its first batch. Where the kernel refuses io_uring
//! (too old, or forbidden by a seccomp policy), [`read_all`] answers `None` and the caller
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

/// Reads every request, in parallel; each answer is its bytes (all `len` of them) or the
/// error. `None` when io_uring cannot be used on this thread, having read nothing.
#[cfg(target_os = "linux")]
pub(crate) fn read_all(requests: &[ReadRequest]) -> Option<Vec<io::Result<Vec<u8>>>> {
    use std::cell::RefCell;
    thread_local! {
        // `None` inside: this thread's kernel refused a ring, or a ring failed mid-batch.
        static RING: RefCell<Option<Option<io_uring::IoUring>>> = const { RefCell::new(None) };
    }
    RING.with(|cell| {
        let mut cell = cell.borrow_mut();
        let slot = cell.get_or_insert_with(|| io_uring::IoUring::new(64).ok());
        let ring = slot.as_mut()?;
        match uring::read_all(ring, requests) {
            // A kernel whose rings lack the read operation (before 5.6) refuses every read
            // as invalid: read one at a time on this thread from now on.
            Ok(answers)
                if answers.iter().all(|a| {
                    a.as_ref().err().and_then(io::Error::raw_os_error) == Some(libc::EINVAL)
                }) =>
            {
                *slot = None;
                None
            }
            Ok(answers) => Some(answers),
            Err(uring::Broken) => {
                // The ring's reads may still land in buffers it leaked on purpose: never use
                // it again on this thread.
                if let Some(ring) = slot.take() {
                    std::mem::forget(ring);
                }
                None
            }
        }
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn read_all(_requests: &[ReadRequest]) -> Option<Vec<io::Result<Vec<u8>>>> {
    None
}

#[cfg(target_os = "linux")]
mod uring {
    use std::io;

    use io_uring::{IoUring, opcode, types};

    use super::ReadRequest;

    /// The ring failed with reads in flight: their buffers were leaked, and so must the ring
    /// be, since the kernel may still write into them.
    pub(super) struct Broken;

    pub(super) fn read_all(
        ring: &mut IoUring,
        requests: &[ReadRequest],
    ) -> Result<Vec<io::Result<Vec<u8>>>, Broken> {
        let n = requests.len();
        // Read straight into each vector's spare capacity: zero-filling a block buffer first
        // costs a pass over it for nothing.
        let mut buffers: Vec<Vec<u8>> =
            requests.iter().map(|r| Vec::with_capacity(r.len)).collect();
        let mut answers: Vec<Option<io::Result<usize>>> = (0..n).map(|_| None).collect();
        let (mut submitted, mut reaped) = (0usize, 0usize);
        while reaped < n {
            while submitted < n {
                let (r, buf) = (&requests[submitted], &mut buffers[submitted]);
                let Ok(len) = u32::try_from(r.len) else {
                    answers[submitted] = Some(Err(io::Error::other("block larger than 4 GiB")));
                    submitted += 1;
                    reaped += 1;
                    continue;
                };
                let entry = opcode::Read::new(types::Fd(r.fd), buf.as_mut_ptr(), len)
                    .offset(r.offset)
                    .build()
                    .user_data(submitted as u64);
                // SAFETY: the buffer's capacity is `len` bytes, and it is neither freed nor
                // moved until its completion is reaped below (or it is leaked when the ring
                // fails).
                if unsafe { ring.submission().push(&entry) }.is_err() {
                    break;
                }
                submitted += 1;
            }
            if reaped == n {
                break;
            }
            // One wait for every read in flight: the batch needs them all, and each wakeup
            // would cost a switch back to this thread.
            let in_flight = submitted - reaped;
            loop {
                match ring.submit_and_wait(in_flight) {
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        std::mem::forget(buffers);
                        return Err(Broken);
                    }
                }
            }
            for cqe in ring.completion() {
                let Some(answer) = answers.get_mut(cqe.user_data() as usize) else {
                    continue;
                };
                let res = cqe.result();
                *answer = Some(match usize::try_from(res) {
                    Ok(read) => Ok(read),
                    Err(_) => Err(io::Error::from_raw_os_error(-res)),
                });
                reaped += 1;
            }
        }
        let mut out = Vec::with_capacity(n);
        for ((request, mut buf), answer) in requests.iter().zip(buffers).zip(answers) {
            out.push(match answer {
                Some(Ok(read)) if read <= request.len => {
                    // SAFETY: the kernel wrote `read` bytes at the start of the buffer, within
                    // its capacity.
                    unsafe { buf.set_len(read) };
                    finish_short(request, &mut buf).map(|()| buf)
                }
                Some(Ok(_)) => Err(io::Error::other("read longer than asked")),
                Some(Err(e)) => Err(e),
                None => Err(io::Error::other("read not completed")),
            });
        }
        Ok(out)
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
