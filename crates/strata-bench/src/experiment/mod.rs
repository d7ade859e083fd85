//! `strata-bench experiment ...`: the experiments the seed documents end with, run on Strata
//! and its peers. Each one writes its raw results as CSV (and JSON with `--json`), draws its
//! figure as SVG and keeps what it printed, all under `--out`.

mod common;
mod csv_data;
mod flodb;
mod growth;
mod monkey;
mod policies;
mod reach;
mod server_mix;
mod seven_tasks;

pub use common::{Common, Out, Table, list, num, open_fresh, progress, strata_binary};

#[derive(clap::Subcommand)]
pub enum Experiment {
    /// The course project's growth experiment: puts in periods, then gets (flat and B-tree
    /// index) and short scans after each, against data size.
    Growth(growth::Args),
    /// The LSM server's workload: GET/SET ratios over Zipf keys, closed and open loop, on
    /// `strata serve` and redis-server side by side.
    ServerMix(server_mix::Args),
    /// The library project's seven tasks in microseconds per entry for growing entry counts,
    /// on random data and on a generated CSV data set loaded as `strata import` loads it.
    SevenTasks(seven_tasks::Args),
    /// FloDB's multi-threaded test: throughput against threads for shares of updates.
    Flodb(flodb::Args),
    /// Strata's merge operator, checkpoints and backups: counters by merge against
    /// read-then-write, and the time and bytes of copies of a 1 GiB database.
    Reach(reach::Args),
    /// Monkey's Bloom filter bits per level against uniform bits at the same total: gets of
    /// missing and existing keys, and the filter false positives per lookup against the
    /// model's.
    Monkey(monkey::Args),
    /// The merge policies (leveling, tiering, lazy leveling) at several size ratios: the
    /// fill's write amplification against the cost of gets, missing gets and scans, with the
    /// cost model's predictions beside them.
    Policies(policies::Args),
}

pub fn run(e: &Experiment) -> Result<(), String> {
    match e {
        Experiment::Growth(a) => growth::run(a),
        Experiment::ServerMix(a) => server_mix::run(a),
        Experiment::SevenTasks(a) => seven_tasks::run(a),
        Experiment::Flodb(a) => flodb::run(a),
        Experiment::Reach(a) => reach::run(a),
        Experiment::Monkey(a) => monkey::run(a),
        Experiment::Policies(a) => policies::run(a),
    }
}
