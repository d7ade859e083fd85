//! Text and pictures of a database's state: statistics, the level table of `inspect`, and
//! the SVG drawing of the tree.

use std::fmt::Write as _;

use strata::{FileInfo, Stats};

use crate::text::show;

/// Bytes in a human unit.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

pub fn stats_text(s: &Stats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "level  files        bytes       target  filter bits/key"
    );
    for (i, l) in s.levels.iter().enumerate() {
        if l.files == 0 && i > 0 && s.levels.iter().skip(i).all(|l| l.files == 0) {
            break;
        }
        let target = if i == 0 {
            "-".to_string()
        } else {
            human_bytes(l.target_bytes)
        };
        let bits = l
            .filter_bits_per_key
            .map_or("-".to_string(), |b| format!("{b:.2}"));
        let _ = writeln!(
            out,
            "L{i:<5} {:>5} {:>12} {:>12} {:>16}",
            l.files,
            human_bytes(l.bytes),
            target,
            bits
        );
    }
    let _ = writeln!(
        out,
        "merge policy      {} with size ratio {}, sorted runs per level {:?}",
        s.merge_policy.name(),
        s.size_ratio,
        s.runs_per_level
    );
    if s.families.len() > 1 {
        let _ = writeln!(
            out,
            "column family     files        bytes     memtable  (the levels above are default's)"
        );
        for f in &s.families {
            let files: usize = f.levels.iter().map(|l| l.files).sum();
            let bytes: u64 = f.levels.iter().map(|l| l.bytes).sum();
            let _ = writeln!(
                out,
                "{:<16} {:>6} {:>12} {:>12}",
                clip(f.name.clone(), 16),
                files,
                human_bytes(bytes),
                human_bytes(f.memtable_bytes)
            );
        }
    }
    let _ = writeln!(
        out,
        "memtable          {} ({} immutable, {}; {} kept for reuse)",
        human_bytes(s.memtable_bytes),
        s.immutable_memtables,
        human_bytes(s.immutable_memtable_bytes),
        human_bytes(s.recycled_memtable_bytes)
    );
    let _ = writeln!(
        out,
        "on disk           {} (SST {}, WAL {})",
        human_bytes(s.disk_bytes()),
        human_bytes(s.sst_bytes),
        human_bytes(s.wal_bytes)
    );
    let _ = writeln!(
        out,
        "block cache       {} of {}, {} hits, {} misses, hit rate {:.1}%",
        human_bytes(s.block_cache_bytes),
        human_bytes(s.block_cache_capacity),
        s.block_cache_hits,
        s.block_cache_misses,
        s.cache_hit_rate() * 100.0
    );
    let _ = writeln!(
        out,
        "pinned by tables  {} (Bloom filters and root index blocks); {} table files open",
        human_bytes(s.table_pinned_bytes),
        s.open_table_files
    );
    let _ = writeln!(
        out,
        "written           user {}, WAL {}, flush {}, compaction {}",
        human_bytes(s.user_bytes_written),
        human_bytes(s.wal_bytes_written),
        human_bytes(s.flush_bytes_written),
        human_bytes(s.compaction_bytes_written)
    );
    let _ = writeln!(
        out,
        "Bloom filters     {:.4} tables read in vain per lookup of a missing key \
         (expected), {} filter false positives since open",
        s.expected_false_positives, s.filter_false_positives
    );
    match s.write_amplification() {
        Some(w) => {
            let _ = writeln!(out, "write amp         {w:.2}");
        }
        None => {
            let _ = writeln!(out, "write amp         - (nothing written since open)");
        }
    }
    let _ = writeln!(
        out,
        "flushes {}, compactions {}, trivial moves {} ({} of these asked for by reads), \
         idle merges {} ({} given up), {}, last sequence {}",
        s.flushes,
        s.compactions,
        s.trivial_moves,
        s.read_compactions,
        s.idle_merges,
        s.idle_merges_given_up,
        if s.compaction_pending {
            "background work pending"
        } else {
            "settled"
        },
        s.last_sequence
    );
    if let Some(p) = &s.poisoned {
        let _ = writeln!(out, "POISONED: {p}");
    }
    out
}

fn clip(s: String, n: usize) -> String {
    if s.chars().count() <= n {
        s
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The level structure: per level the files, key ranges, sizes and entry counts; per
/// column family when the database has more than the default one.
pub fn inspect_text(s: &Stats) -> String {
    let mut out = String::new();
    let mut total = Totals::default();
    if s.families.len() > 1 {
        for f in &s.families {
            let _ = writeln!(out, "column family {} (id {}):", f.name, f.id);
            inspect_levels(&mut out, &f.files, s.levels.len(), &mut total);
        }
    } else {
        inspect_levels(&mut out, &s.files, s.levels.len(), &mut total);
    }
    let memtables: u64 = s.families.iter().map(|f| f.memtable_bytes).sum();
    let _ = writeln!(
        out,
        "total: {} files, {}, {} entries, {} tombstones; memtable {}",
        total.files,
        human_bytes(total.bytes),
        total.entries,
        total.deletions,
        human_bytes(memtables)
    );
    out
}

#[derive(Default)]
struct Totals {
    files: usize,
    bytes: u64,
    entries: u64,
    deletions: u64,
}

fn inspect_levels(out: &mut String, all: &[FileInfo], levels: usize, total: &mut Totals) {
    for level in 0..levels {
        let files: Vec<&FileInfo> = all.iter().filter(|f| f.level == level).collect();
        if files.is_empty() {
            continue;
        }
        let bytes: u64 = files.iter().map(|f| f.size).sum();
        let entries: u64 = files.iter().map(|f| f.entries).sum();
        let dels: u64 = files.iter().map(|f| f.deletions).sum();
        let _ = writeln!(
            out,
            "L{level}: {} files, {}, {entries} entries, {dels} tombstones",
            files.len(),
            human_bytes(bytes)
        );
        let _ = writeln!(
            out,
            "  {:>8}  {:>10}  {:>9}  {:>9}  key range",
            "file", "size", "entries", "deletes"
        );
        for f in &files {
            let _ = writeln!(
                out,
                "  {:>8}  {:>10}  {:>9}  {:>9}  {} .. {}",
                format!("{:06}", f.number),
                human_bytes(f.size),
                f.entries,
                f.deletions,
                clip(show(&f.smallest_key), 24),
                clip(show(&f.largest_key), 24)
            );
        }
        total.files += files.len();
        total.bytes += bytes;
        total.entries += entries;
        total.deletions += dels;
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws the tree: one row per level, each file a box as wide as its bytes, laid out in key
/// order (level 0 in file order, newest last), so that the growth of the levels by the size
/// ratio can be seen at a glance.
pub fn svg(s: &Stats, title: &str) -> String {
    const WIDTH: f64 = 1000.0;
    const LEFT: f64 = 170.0;
    const ROW: f64 = 44.0;
    const TOP: f64 = 50.0;
    let levels: Vec<usize> = (0..s.levels.len())
        .filter(|&l| s.levels[l].files > 0)
        .collect();
    let widest = s.levels.iter().map(|l| l.bytes).max().unwrap_or(1).max(1) as f64;
    let scale = WIDTH / widest;
    let height = TOP + ROW * levels.len().max(1) as f64 + 30.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">",
        LEFT + WIDTH + 20.0
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="24" font-size="16">{}</text>"#,
        xml_escape(title)
    );
    for (row, &level) in levels.iter().enumerate() {
        let y = TOP + row as f64 * ROW;
        let l = &s.levels[level];
        let _ = writeln!(
            out,
            r#"<text x="10" y="{}">L{level}: {} files, {}</text>"#,
            y + 22.0,
            l.files,
            human_bytes(l.bytes)
        );
        let mut files: Vec<&FileInfo> = s.files.iter().filter(|f| f.level == level).collect();
        if level == 0 {
            files.sort_by_key(|f| f.number);
        } else {
            files.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
        }
        let mut x = LEFT;
        for f in files {
            let w = (f.size as f64 * scale).max(1.5);
            let shade = 200 - (120.0 * (f.deletions as f64 / f.entries.max(1) as f64)) as i32;
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"32\" \
                 fill=\"rgb(70,{shade},180)\" stroke=\"white\" stroke-width=\"0.5\">\
                 <title>{:06}.sst: {} .. {}, {}, {} entries, {} tombstones</title></rect>",
                f.number,
                xml_escape(&show(&f.smallest_key)),
                xml_escape(&show(&f.largest_key)),
                human_bytes(f.size),
                f.entries,
                f.deletions
            );
            x += w;
        }
        if l.target_bytes > 0 {
            let tx = LEFT + (l.target_bytes as f64 * scale).min(WIDTH);
            let _ = writeln!(
                out,
                "<line x1=\"{tx:.1}\" y1=\"{:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"red\" \
                 stroke-dasharray=\"3,2\"/>",
                y - 3.0,
                y + 35.0
            );
        }
    }
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"{}\" fill=\"gray\">boxes: SST files in key order, width by bytes; \
         red dashes: level targets</text>",
        height - 10.0
    );
    out.push_str("</svg>\n");
    out
}
