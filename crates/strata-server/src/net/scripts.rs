//! The script thread. EVAL and FCALL run there, one at a time, not on the worker of the
//! connection that sent them: while a script runs, its worker goes on serving its other
//! connections, whose commands wait for the script (it holds the keyspace alone) and, once it
//! has run `busy-reply-threshold`, are answered BUSY, so that SCRIPT KILL and SHUTDOWN reach
//! the server whichever worker they arrive on. The calling connection waits, its later
//! commands read but not run, until its reply comes back.

use std::cell::RefCell;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::Client;
use crate::commands;
use crate::shared::{ScriptJob, Shared};

/// Starts the script thread; it ends once the server shuts down.
pub(crate) fn spawn_script_thread(shared: Arc<Shared>) -> Result<JoinHandle<()>, String> {
    let (tx, rx) = mpsc::channel::<ScriptJob>();
    let _ = shared.script_jobs.set(Mutex::new(tx));
    std::thread::Builder::new()
        .name("strata-scripts".into())
        .spawn(move || {
            loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(job) => job(&shared),
                    Err(RecvTimeoutError::Timeout) => {
                        if shared.shutdown.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        })
        .map_err(|e| format!("cannot start the script thread: {e}"))
}

thread_local! {
    /// The scripts this worker's round asked for, handed on when the round ends.
    static HELD: RefCell<Vec<ScriptJob>> = const { RefCell::new(Vec::new()) };
}

/// True when this worker holds a script to hand on.
pub(super) fn holding() -> bool {
    HELD.with_borrow(|held| !held.is_empty())
}

/// Hands the scripts held in this round to the script thread.
pub(super) fn hand_on(shared: &Shared) {
    let jobs = HELD.with_borrow_mut(std::mem::take);
    if jobs.is_empty() {
        return;
    }
    let tx = shared
        .script_jobs
        .get()
        .map(|tx| tx.lock().unwrap_or_else(|e| e.into_inner()));
    for job in jobs {
        if let Some(tx) = tx.as_ref() {
            // The thread ends only after the workers; a job it cannot take is dropped with it.
            let _ = tx.send(job);
        }
    }
}

/// Holds connection `at`'s script command for the script thread (see [`hand_on`]).
pub(super) fn submit(shared: &Shared, at: (usize, usize), c: &mut Client, argv: &[&[u8]]) {
    let mut conn = commands::script_client(shared, &c.state);
    let args: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
    let (worker, slot, id) = (at.0, at.1, c.state.id);
    let job: ScriptJob = Box::new(move |shared: &Shared| {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        // A panic on the way (outside the interpreter, which catches its own) answers the
        // connection with an error and leaves the thread, and the line of scripts, going.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut out = Vec::new();
            commands::run_on_script_thread(shared, &mut conn, &argv, &mut out);
            out
        }));
        let out = ran.unwrap_or_else(|_| b"-ERR the script failed inside the server\r\n".to_vec());
        shared.scripts.done();
        shared
            .script_done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((worker, slot, id, out));
        shared.wake_worker(worker);
    });
    if shared.script_jobs.get().is_some() {
        shared.scripts.queued();
        HELD.with_borrow_mut(|held| held.push(job));
        c.awaiting_script = true;
    } else {
        crate::resp::Reply::new(&mut c.output, c.state.protocol)
            .error("ERR the script thread is not running");
    }
}

/// Appends the replies of finished scripts to this worker's connections, which go on with
/// their next commands.
pub(super) fn collect(
    shared: &Shared,
    worker: usize,
    clients: &mut [Option<Client>],
    ready: &mut Vec<usize>,
) {
    let mine: Vec<_> = {
        let mut done = shared.script_done.lock().unwrap_or_else(|e| e.into_inner());
        if done.is_empty() {
            return;
        }
        let (mine, others) = std::mem::take(&mut *done)
            .into_iter()
            .partition(|d| d.0 == worker);
        *done = others;
        mine
    };
    for (_, slot, id, reply) in mine {
        let Some(Some(c)) = clients.get_mut(slot) else {
            continue;
        };
        if c.state.id != id {
            continue;
        }
        c.output.extend_from_slice(&reply);
        c.awaiting_script = false;
        if !c.queued {
            c.queued = true;
            ready.push(slot);
        }
    }
}
