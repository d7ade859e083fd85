//! Redis-style glob patterns for `SCAN ... MATCH`: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, and
//! `\` to take the next byte literally.

#![deny(clippy::indexing_slicing)]

pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            let rest = {
                let mut r = rest;
                while let Some((b'*', more)) = r.split_first() {
                    r = more;
                }
                r
            };
            if rest.is_empty() {
                return true;
            }
            (0..=s.len()).any(|i| matches(rest, s.get(i..).unwrap_or_default()))
        }
        Some((b'?', rest)) => s.split_first().is_some_and(|(_, tail)| matches(rest, tail)),
        Some((b'[', rest)) => {
            let Some((&c, tail)) = s.split_first() else {
                return false;
            };
            let (negate, mut p) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut hit = false;
            loop {
                match p {
                    [] => return false, // unterminated class matches nothing
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
            hit != negate && matches(p, tail)
        }
        Some((b'\\', rest)) if !rest.is_empty() => match (rest.split_first(), s.split_first()) {
            (Some((p, prest)), Some((c, stail))) => p == c && matches(prest, stail),
            _ => false,
        },
        Some((p, rest)) => s
            .split_first()
            .is_some_and(|(c, tail)| p == c && matches(rest, tail)),
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
    }
}
