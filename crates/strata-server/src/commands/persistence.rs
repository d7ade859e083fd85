//! SAVE, BGSAVE and LASTSAVE: checkpoints of the database (see `save.rs`).

use super::{Ctx, Outcome};
use crate::save::Background;

/// `LASTSAVE`: when the last SAVE or BGSAVE succeeded (the server's start before any).
pub(super) fn lastsave(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.out.int(cx.shared.saves.last_save_unix() as i64);
    Ok(())
}

/// `SAVE`: a checkpoint of the database in `DIR/checkpoint`, written before the reply.
/// Other clients go on meanwhile (the checkpoint is made while writes continue).
pub(super) fn save(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.shared.saves.save(&cx.shared.db, &cx.shared.config.dir)?;
    cx.out.ok();
    Ok(())
}

/// `BGSAVE [SCHEDULE]`: the same checkpoint, written by the saver thread.
pub(super) fn bgsave(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let schedule = match a {
        [_] => false,
        [_, opt] if opt.eq_ignore_ascii_case(b"schedule") => true,
        _ => return Err(super::syntax()),
    };
    match cx.shared.saves.background(schedule) {
        Background::Started => cx.out.simple("Background saving started"),
        Background::Scheduled => cx.out.simple("Background saving scheduled"),
        Background::AlreadyRunning => {
            return Err("ERR Background save already in progress".into());
        }
    }
    Ok(())
}
