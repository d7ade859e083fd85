//! Redis-style glob patterns for `SCAN ... MATCH`: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, and
//! `\` to take the next byte literally.

#![deny(clippy::indexing_slicing)]

/// Whether `s` matches `pattern`. Linear in `s` per star of the pattern: after a mismatch the
/// match resumes one byte further after the last `*` only (every other element takes exactly
/// one byte), so a pattern like `a*a*a*...b` cannot make it take exponential time.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (pattern, 0usize);
    // After the last `*`: the pattern after it, and where in `s` it was tried.
    let mut star: Option<(&[u8], usize)> = None;
    loop {
        if let Some((b'*', rest)) = p.split_first() {
            let mut rest = rest;
            while let Some((b'*', more)) = rest.split_first() {
                rest = more;
            }
            if rest.is_empty() {
                return true;
            }
            star = Some((rest, i));
            p = rest;
            continue;
        }
        if p.is_empty() && i == s.len() {
            return true;
        }
        let step = s.get(i).and_then(|&c| one(p, c));
        match step {
            Some(rest) => {
                p = rest;
                i += 1;
            }
            None => match star {
                Some((rest, tried)) if tried < s.len() => {
                    star = Some((rest, tried + 1));
                    p = rest;
                    i = tried + 1;
                }
                _ => return false,
            },
        }
    }
}

/// Matches the pattern's first element (not `*`) against the byte `c`; the pattern after it
/// when it matches.
fn one(pattern: &[u8], c: u8) -> Option<&[u8]> {
    match pattern.split_first()? {
        (b'?', rest) => Some(rest),
        (b'[', rest) => {
            let (negate, mut p) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut hit = false;
            loop {
                match p {
                    [] => return None, // an unterminated class matches nothing
                    [b']', r @ ..] => {
                        p = r;
                        break;
                    }
                    [b'\\', x, r @ ..] => {
                        hit |= *x == c;
                        p = r;
                    }
                    [a, b'-', z, r @ ..] if *z != b']' => {
                        let (lo, hi) = if a <= z { (*a, *z) } else { (*z, *a) };
                        hit |= (lo..=hi).contains(&c);
                        p = r;
                    }
                    [x, r @ ..] => {
                        hit |= *x == c;
                        p = r;
                    }
                }
            }
            (hit != negate).then_some(p)
        }
        (b'\\', rest) if !rest.is_empty() => {
            let (x, rest) = rest.split_first()?;
            (*x == c).then_some(rest)
        }
        (x, rest) => (*x == c).then_some(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        assert!(matches(b"*", b""));
        assert!(matches(b"user:*", b"user:42"));
        assert!(!matches(b"user:*", b"item:42"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-c]llo", b"hbllo"));
        assert!(matches(b"a\\*b", b"a*b"));
        assert!(!matches(b"a\\*b", b"axb"));
        assert!(matches(b"*a*b*c*", b"xxaxxbxxcxx"));
        assert!(!matches(b"[abc", b"a"));
        assert!(matches(b"a*b", b"ab") && matches(b"a*b", b"aXXb") && !matches(b"a*b", b"aXXc"));
        assert!(matches(b"*?", b"x") && !matches(b"*?", b""));
        assert!(matches(b"a*a*c", b"aaac") && !matches(b"a*a*c", b"aacx"));
    }

    #[test]
    fn many_stars_take_linear_time() {
        // Redis's regression: a pattern of many stars against a long key that almost matches.
        let pattern = [b"a*".repeat(50), b"b".to_vec()].concat();
        let key = vec![b'a'; 10_000];
        let started = std::time::Instant::now();
        assert!(!matches(&pattern, &key));
        assert!(matches(&pattern, &[key.clone(), b"b".to_vec()].concat()));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "backtracking blew up"
        );
    }
}
