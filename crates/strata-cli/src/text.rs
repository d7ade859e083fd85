//! Keys and values as a person types and reads them.
//!
//! Input: plain words are taken as they are; a double-quoted string may hold spaces and the
//! escapes `\xNN`, `\n`, `\r`, `\t`, `\0`, `\\` and `\"`, so any bytes can be given.
//! Output: printable ASCII is shown as it is, every other byte as `\xNN` (and `\\` for a
//! backslash), so binary data never garbles a terminal.

/// Splits a command line into words, honouring double quotes and escapes.
pub fn split_words(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        let mut word = Vec::new();
        if first == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => word.extend(unescape_one(&mut chars)?),
                    c => push_char(&mut word, c),
                }
            }
            if !closed {
                return Err("unterminated quoted string".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                push_char(&mut word, c);
            }
        }
        words.push(word);
    }
    Ok(words)
}

fn push_char(dst: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    dst.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

fn unescape_one(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<Vec<u8>, String> {
    let c = chars.next().ok_or("backslash at the end of the input")?;
    Ok(match c {
        'n' => vec![b'\n'],
        'r' => vec![b'\r'],
        't' => vec![b'\t'],
        '0' => vec![0],
        '\\' => vec![b'\\'],
        '"' => vec![b'"'],
        'x' => {
            let hi = chars.next().and_then(|c| c.to_digit(16));
            let lo = chars.next().and_then(|c| c.to_digit(16));
            match (hi, lo) {
                (Some(h), Some(l)) => vec![(h * 16 + l) as u8],
                _ => return Err("\\x must be followed by two hex digits".into()),
            }
        }
        other => return Err(format!("unknown escape \\{other}")),
    })
}

/// Parses one argument given on the command line: quoted forms are unescaped, plain ones
/// taken as they are.
pub fn parse_arg(s: &str) -> Result<Vec<u8>, String> {
    if s.starts_with('"') {
        let mut words = split_words(s)?;
        if words.len() != 1 {
            return Err(format!("{s:?} is more than one quoted word"));
        }
        Ok(words.remove(0))
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

/// Shows bytes readably: printable ASCII as is, the rest as `\xNN`.
pub fn show(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses hexadecimal (for `--hex` input).
pub fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("{s:?} is not hexadecimal: odd length"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("{s:?} is not hexadecimal"))
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` of seconds since the Unix epoch, in UTC (the proleptic Gregorian
/// calendar, by days counted in 400-year eras).
pub fn utc_time(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Days since 0000-03-01, so that a leap day ends each year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_time_matches_known_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc_time(1_764_050_400), "2025-11-25 06:00:00");
        assert_eq!(utc_time(4_107_542_399), "2100-02-28 23:59:59");
    }

    #[test]
    fn words_quotes_and_escapes() {
        let w = split_words(r#"put "a key" "\x00\xffz\n" plain"#).unwrap();
        assert_eq!(
            w,
            vec![
                b"put".to_vec(),
                b"a key".to_vec(),
                vec![0, 0xff, b'z', b'\n'],
                b"plain".to_vec()
            ]
        );
        assert!(split_words(r#"put "open"#).is_err());
        assert!(split_words(r#""\xZZ""#).is_err());
        assert_eq!(split_words(r#""""#).unwrap(), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn show_escapes_binary_and_round_trips_through_parse() {
        let bytes = vec![b'a', 0, 0xff, b'\\', b' '];
        let shown = show(&bytes);
        assert_eq!(shown, "a\\x00\\xff\\\\ ");
        assert_eq!(parse_arg(&format!("\"{shown}\"")).unwrap(), bytes);
        assert_eq!(unhex(&hex(&bytes)).unwrap(), bytes);
        assert!(unhex("abc").is_err());
    }
}
