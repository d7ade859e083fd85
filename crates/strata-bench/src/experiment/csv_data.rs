//! A data set of the shape of the library project's (seed 002) Trending YouTube Video
//! Statistics, generated so that no download is needed: one row per video, keyed by an
//! 11-character URL-safe video id, with a title of realistic length that may hold commas,
//! double quotes and line breaks (quoted as CSV quotes them), and the data set's other
//! columns beside.
//!
//! Titles are built from a vocabulary of words, 2 to 16 of them, so that their lengths
//! spread from a few characters to about 100 (the real titles are at most 100 characters).
//! One title in eight has a comma, one in forty a quoted phrase, one in a hundred a line
//! break. Ids are drawn at random and kept unique.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use crate::workloads::Rng;

/// Key-value pairs in file order.
pub type Records = Vec<(Vec<u8>, Vec<u8>)>;

const ID_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

const WORDS: &[&str] = &[
    "Official",
    "Video",
    "Trailer",
    "Music",
    "Live",
    "Full",
    "Episode",
    "Review",
    "Highlights",
    "We",
    "Want",
    "to",
    "Talk",
    "About",
    "Our",
    "Marriage",
    "The",
    "Best",
    "of",
    "2017",
    "New",
    "First",
    "Look",
    "How",
    "I",
    "Made",
    "This",
    "Challenge",
    "Reaction",
    "vs",
    "Game",
    "Season",
    "Finale",
    "Interview",
    "Late",
    "Show",
    "Tonight",
    "Why",
    "You",
    "Should",
    "Never",
    "Cooking",
    "Recipe",
    "Easy",
    "DIY",
    "Makeup",
    "Tutorial",
    "Prank",
    "Funny",
    "Moments",
    "World",
    "Cup",
    "News",
    "Update",
    "Behind",
    "Scenes",
    "Unboxing",
    "Apple",
    "iPhone",
    "X",
    "Star",
    "Wars",
    "Last",
    "Jedi",
    "Taylor",
    "Swift",
    "Ready",
    "For",
    "It",
    "Lyric",
    "Remix",
    "feat.",
    "Part",
    "2",
    "Day",
    "in",
    "Life",
    "Vlog",
    "Explained",
    "Minutes",
    "Everything",
    "Wrong",
    "With",
    "Top",
    "10",
    "Secrets",
    "Nobody",
    "Tells",
    "Christmas",
    "Special",
    "Edition",
];

const CHANNELS: &[&str] = &[
    "CaseyNeistat",
    "LastWeekTonight",
    "Rudy Mancuso",
    "Good Mythical Morning",
    "nigahiga",
    "iJustine",
    "Saturday Night Live",
    "CrazyRussianHacker",
    "Vox",
    "The Late Show",
    "BuzzFeedVideo",
    "Tasty",
    "Marvel Entertainment",
    "TaylorSwiftVEVO",
    "Jimmy Kimmel Live",
];

/// A video's title: words, with the punctuation real titles carry now and then.
fn title(rng: &mut Rng) -> String {
    let words = 2 + rng.below(15) as usize;
    let mut t = String::new();
    for i in 0..words {
        if i > 0 {
            t.push(' ');
        }
        t.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    if rng.below(8) == 0 {
        let at = t.find(' ').unwrap_or(t.len());
        t.insert(at, ',');
    }
    if rng.below(40) == 0 {
        t = format!(
            "\"{t}\" | {}",
            WORDS[rng.below(WORDS.len() as u64) as usize]
        );
    }
    if rng.below(100) == 0 {
        t.push_str("\nPart 2");
    }
    t.truncate(100);
    t
}

/// A field as CSV writes it: quoted, with quotes doubled, when it holds a comma, a quote or
/// a line break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes `rows` videos to `path`; returns their (video id, title) pairs in file order.
pub fn generate(path: &Path, rows: u64, seed: u64) -> Result<Records, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    writeln!(
        f,
        "video_id,trending_date,title,channel_title,category_id,views,likes,comment_count"
    )
    .map_err(io)?;
    let mut rng = Rng::new(seed);
    let mut seen = HashSet::new();
    let mut records = Vec::with_capacity(rows as usize);
    while (records.len() as u64) < rows {
        let id: String = (0..11)
            .map(|_| ID_CHARS[rng.below(64) as usize] as char)
            .collect();
        if !seen.insert(id.clone()) {
            continue;
        }
        let t = title(&mut rng);
        let channel = CHANNELS[rng.below(CHANNELS.len() as u64) as usize];
        let views = rng.below(20_000_000);
        writeln!(
            f,
            "{id},17.{:02}.{:02},{},{},{},{views},{},{}",
            1 + rng.below(28),
            1 + rng.below(12),
            field(&t),
            field(channel),
            1 + rng.below(44),
            views / (10 + rng.below(90)),
            views / (100 + rng.below(900)),
        )
        .map_err(io)?;
        records.push((id.into_bytes(), t.into_bytes()));
    }
    f.flush().map_err(io)?;
    Ok(records)
}

/// Reads the (video id, title) pairs back as `strata import --key video_id --value title`
/// reads them: the header names the columns, fields may be quoted.
pub fn read(path: &Path) -> Result<Records, String> {
    let err = |e: csv::Error| format!("{}: {e}", path.display());
    let mut csv = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(err)?;
    let headers = csv.headers().map_err(err)?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or(format!("{}: no column {name}", path.display()))
    };
    let (id, title) = (col("video_id")?, col("title")?);
    let mut records = Vec::new();
    for row in csv.records() {
        let row = row.map_err(err)?;
        match (row.get(id), row.get(title)) {
            (Some(k), Some(v)) => records.push((k.as_bytes().to_vec(), v.as_bytes().to_vec())),
            _ => {
                return Err(format!(
                    "{}: a row without an id or a title",
                    path.display()
                ));
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_rows_read_back_as_written_with_their_commas_quotes_and_line_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("videos.csv");
        let written = generate(&path, 3000, 5).unwrap();
        let read_back = read(&path).unwrap();
        assert_eq!(read_back, written);
        let has = |c: u8| written.iter().filter(|(_, t)| t.contains(&c)).count();
        // The data set carries what makes CSV hard, so that the reader is tested on it.
        assert!(has(b',') > 100, "{} titles with commas", has(b','));
        assert!(has(b'"') > 20, "{} titles with quotes", has(b'"'));
        assert!(has(b'\n') > 5, "{} titles with line breaks", has(b'\n'));
        let ids: HashSet<_> = written.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(ids.len(), 3000);
        assert!(written.iter().all(|(k, _)| k.len() == 11));
        let longest = written.iter().map(|(_, t)| t.len()).max().unwrap();
        assert!((60..=100).contains(&longest), "longest title {longest}");
    }
}
